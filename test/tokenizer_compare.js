// Compares our tokenizer (through the C API, test/tokenizer_batch.c) with tiktoken's gpt2
// encoding on sets of strings, and exits 1 on the first set with a difference.
// Usage: node test/tokenizer_compare.js BATCH_PROGRAM TOKENIZER_FILE SET...
// Sets:
//   cases FILE       each JSON-string line of FILE (test/tokenizer_edge_cases.txt)
//   random N SEED    N strings glued together from pieces of the edge cases, seeded
//   special          strings with "<|endoftext|>": with -s against tiktoken's encode(s, "all")
//   unicode          every code point below U+33000 and in U+E0000..U+E0FFF, plus every 97th of
//                    the rest, each in a few contexts (letters, digits, punctuation, spaces)
//   long SEED        long pieces (thousands of characters of one class), where the merge order
//                    matters most: our heap against tiktoken's scan for the minimum
//   bytes N SEED     N random byte strings, mostly invalid UTF-8: only the round trip is checked
//                    (tiktoken cannot take them); the batch program checks decode(encode(x)) == x
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { get_encoding } = require(path.join(__dirname, 'node_modules', 'tiktoken'));

const [batch, tokfile, ...sets] = process.argv.slice(2);
if (!batch || !tokfile || sets.length === 0) {
    console.error('usage: node tokenizer_compare.js BATCH_PROGRAM TOKENIZER_FILE SET...');
    process.exit(2);
}
const enc = get_encoding('gpt2');

// mulberry32: a tiny seeded generator, so that the random sets are the same on every run
function rng(seed) {
    let a = seed >>> 0;
    return () => {
        a = (a + 0x6D2B79F5) >>> 0;
        let t = a;
        t = Math.imul(t ^ (t >>> 15), t | 1);
        t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
        return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
}

function ours(buffers, special) {
    const parts = [];
    for (const b of buffers) {
        const len = Buffer.alloc(4);
        len.writeUInt32LE(b.length);
        parts.push(len, b);
    }
    const args = [tokfile].concat(special ? ['-s'] : []);
    const r = spawnSync(batch, args, { input: Buffer.concat(parts), maxBuffer: 1 << 30 });
    if (r.status !== 0) {
        console.error(`FAIL: ${batch} exited ${r.status}: ${r.stderr}`);
        process.exit(1);
    }
    const lines = r.stdout.toString().split('\n');
    lines.pop();  // after the last newline
    if (lines.length !== buffers.length) {
        console.error(`FAIL: ${lines.length} lines for ${buffers.length} strings`);
        process.exit(1);
    }
    return lines;
}

// Encodes the strings both ways; prints the first differences and exits 1 if there are any.
function compare(name, strings, special, labels) {
    const got = ours(strings.map((s) => Buffer.from(s, 'utf8')), special);
    let bad = 0;
    let tokens = 0;
    for (let i = 0; i < strings.length; i++) {
        const ids = special ? enc.encode(strings[i], 'all') : enc.encode_ordinary(strings[i]);
        const want = Array.from(ids).join(' ');
        tokens += ids.length;
        if (got[i] !== want) {
            if (bad < 10) {
                const what = labels ? labels[i] : JSON.stringify(strings[i]).slice(0, 300);
                console.log(`MISMATCH ${name} #${i}: ${what}\n  ours:     ${got[i].slice(0, 300)}\n  tiktoken: ${want.slice(0, 300)}`);
            }
            bad++;
        }
    }
    const mode = special ? 'with -s (vs encode "all")' : '(vs encode_ordinary)';
    console.log(`${name}: ${strings.length} strings, ${tokens} tokens ${mode}: ${bad} differ`);
    if (bad > 0) process.exit(1);
}

function readCases(file) {
    return fs.readFileSync(file, 'utf8').split('\n')
        .filter((l) => l.trim() !== '' && !l.startsWith('#'))
        .map((l) => JSON.parse(l));
}

const edgeFile = path.join(__dirname, 'tokenizer_edge_cases.txt');
for (let i = 0; i < sets.length; i++) {
    const set = sets[i];
    if (set === 'cases') {
        const cases = readCases(sets[++i]);
        compare('cases', cases, false);
        compare('cases', cases, true);
    } else if (set === 'random') {
        const n = parseInt(sets[++i], 10);
        const next = rng(parseInt(sets[++i], 10));
        // pieces: whole edge cases, and single characters (code points) cut out of them
        const cases = readCases(edgeFile);
        const chars = [...new Set(cases.flatMap((c) => Array.from(c)))];
        const strings = [];
        for (let k = 0; k < n; k++) {
            let s = '';
            const parts = 1 + Math.floor(next() * 8);
            for (let p = 0; p < parts; p++) {
                if (next() < 0.5) s += cases[Math.floor(next() * cases.length)];
                else s += chars[Math.floor(next() * chars.length)].repeat(1 + Math.floor(next() * 3));
            }
            strings.push(s);
        }
        compare('random', strings, false);
    } else if (set === 'special') {
        const E = '<|endoftext|>';
        const strings = [E, E + E, 'a' + E + 'b', 'hello  ' + E + '  world', E + '\n\nFirst', 'x <' + E + '>',
                         '<|endoftext', 'endoftext|>' + E, ' ' + E + ' ', '\n' + E + '\n', '<<|endoftext|>|>',
                         "it's" + E + "'s", '123' + E + '456'];
        compare('special', strings, true);
        compare('special', strings, false);
    } else if (set === 'unicode') {
        const cps = [];
        for (let cp = 0; cp < 0x110000; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF) continue;  // surrogates are not characters
            if (cp < 0x33000 || (cp >= 0xE0000 && cp < 0xE1000) || cp % 97 === 0) cps.push(cp);
        }
        const strings = cps.map((cp) => {
            const x = String.fromCodePoint(cp);
            return `a${x}b ${x}${x}1${x}! ${x}'s  ${x}\n`;
        });
        const labels = cps.map((cp) => 'U+' + cp.toString(16).toUpperCase().padStart(4, '0'));
        compare('unicode', strings, false, labels);
    } else if (set === 'long') {
        const next = rng(parseInt(sets[++i], 10));
        const pick = (alphabet, n) => Array.from({ length: n }, () => alphabet[Math.floor(next() * alphabet.length)]).join('');
        const lower = 'abcdefghijklmnopqrstuvwxyz';
        const strings = [
            'a'.repeat(5000), 'ab'.repeat(2500), ' ' + 'x'.repeat(4999), pick(lower, 5000), pick('etaoin', 5000),
            pick(lower + lower.toUpperCase(), 4000), pick('0123456789', 5000), '7'.repeat(5000), ' '.repeat(5000),
            ' '.repeat(4999) + 'x', '\n'.repeat(3000) + 'x', ' \t\n'.repeat(1000), pick('!?.,;:-()[]{}<>/', 5000),
            '='.repeat(5000), '\u00e9'.repeat(3000), pick('\u00e9\u00e8\u00e0\u00fc\u00f6\u00e4\u00df', 3000),
            pick('\u4f60\u597d\u4e16\u754c\u65e5\u672c\u8a9e', 2000), '\u{1F600}'.repeat(1500),
            pick('\u05e9\u05dc\u05d5\u05dd', 3000), 'e\u0301'.repeat(2000),
        ];
        compare('long', strings, false, strings.map((x) => `${JSON.stringify(x.slice(0, 12))}... (${x.length} chars)`));
    } else if (set === 'bytes') {
        const n = parseInt(sets[++i], 10);
        const next = rng(parseInt(sets[++i], 10));
        const buffers = [];
        for (let k = 0; k < n; k++) {
            const b = Buffer.alloc(Math.floor(next() * 64));
            for (let j = 0; j < b.length; j++) {
                // half uniform bytes, half drawn from bytes that make edge cases: spaces, ', lead
                // and continuation bytes, ASCII letters and digits
                b[j] = next() < 0.5 ? Math.floor(next() * 256)
                    : [0x20, 0x27, 0x0a, 0x61, 0x73, 0x31, 0xc3, 0xa9, 0xe2, 0x80, 0xf0, 0x9f, 0xed, 0xa0, 0xc0, 0xff][Math.floor(next() * 16)];
            }
            buffers.push(b);
        }
        ours(buffers, false);  // exits 1 on a failed round trip
        ours(buffers, true);
        console.log(`bytes: ${n} random byte strings: decode(encode(x)) == x for all`);
    } else {
        console.error(`unknown set ${set}`);
        process.exit(2);
    }
}
enc.free();
