// Checks the Tiny Shakespeare token files that `./tokenizer prepare` wrote against the same
// preparation done with tiktoken, as llm.c's dev/data/tinyshakespeare.py does it: split the text
// on "\n\n", <|endoftext|> before each section, each section but the last keeps its "\n\n",
// encode_ordinary; the first 32,768 tokens are validation, the rest training.
// Usage: node test/tokenizer_shakespeare.js TEXT VAL_BIN TRAIN_BIN
const fs = require('fs');
const path = require('path');
const { get_encoding } = require(path.join(__dirname, 'node_modules', 'tiktoken'));

const [textPath, valPath, trainPath] = process.argv.slice(2);
const enc = get_encoding('gpt2');
const sections = fs.readFileSync(textPath, 'utf8').split('\n\n');
const want = [];
sections.forEach((s, i) => {
    want.push(50256);
    for (const id of enc.encode_ordinary(i < sections.length - 1 ? s + '\n\n' : s)) want.push(id);
});
enc.free();

function readTokens(file) {
    const b = fs.readFileSync(file);
    const magic = b.readInt32LE(0), version = b.readInt32LE(4), n = b.readInt32LE(8);
    if (magic !== 20240520 || version !== 1) throw new Error(`${file}: magic ${magic} version ${version}`);
    if (b.length !== 1024 + 2 * n) throw new Error(`${file}: ${b.length} bytes, header says ${n} tokens`);
    const ids = [];
    for (let i = 0; i < n; i++) ids.push(b.readUInt16LE(1024 + 2 * i));
    return ids;
}
const val = readTokens(valPath), train = readTokens(trainPath);
console.log(`val ${val.length} tokens, train ${train.length} tokens, total ${val.length + train.length}; ` +
            `tiktoken preparation: ${want.length} tokens`);
let bad = val.length !== 32768 || train.length !== 305260;
if (bad) console.log('FAIL: expected 32768 validation and 305260 training tokens (338028 in all)');
const got = val.concat(train);
for (let i = 0; i < Math.max(got.length, want.length); i++) {
    if (got[i] !== want[i]) {
        console.log(`FAIL: token ${i} is ${got[i]}, tiktoken's preparation has ${want[i]}`);
        bad = true;
        break;
    }
}
process.exit(bad ? 1 : 0);
