// Times tiktoken's GPT-2 encode_ordinary (npm tiktoken, Rust compiled to WebAssembly; one thread)
// on FILE, REPEATS times, after loading both: the same measurement as `./tokenizer bench`.
// Usage: node dev/bench/bench_tiktoken.js FILE [REPEATS]   (tiktoken from test/node_modules)
const fs = require('fs');
const path = require('path');
const { get_encoding } = require(path.join(__dirname, '..', '..', 'test', 'node_modules', 'tiktoken'));

const file = process.argv[2];
const repeats = parseInt(process.argv[3] || '10', 10);
const bytes = fs.readFileSync(file);
const text = bytes.toString('utf8');
const enc = get_encoding('gpt2');
const secs = [];
let n = 0;
for (let r = 0; r < repeats; r++) {
    const t0 = process.hrtime.bigint();
    n = enc.encode_ordinary(text).length;
    secs.push(Number(process.hrtime.bigint() - t0) / 1e9);
}
secs.sort((a, b) => a - b);
const median = secs[Math.floor(repeats / 2)];
console.log(`tiktoken: ${file}: ${bytes.length} bytes -> ${n} tokens, median of ${repeats} runs ` +
            `${median.toFixed(4)} s, ${(bytes.length / median / 1e6).toFixed(2)} MB/s`);
enc.free();
