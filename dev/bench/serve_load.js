// dev/bench/serve_load.js: the clients of make bench-serve (dev/bench/bench_serve.sh). CLIENTS
// clients, each sending ROUNDS streamed completions back to back (a closed loop: a client's next
// request leaves when its last answer has ended) to a server of OpenAI's completions API, over
// HTTP with Node's built-in fetch (Node 18 or newer; no npm package). Every request asks for the
// same prompt, TOKENS new tokens at temperature 1, and its own seed: client c's round r has seed
// c * ROUNDS + r + 1, so the CLIENTS * ROUNDS requests have seeds 1 .. CLIENTS * ROUNDS, the
// requests of `infer -f` that bench_serve.sh compares with.
//
// Per request, from the server-sent events:
//   ttft       ms from sending the request to the first event with text
//   per-token  (last event - first event) / (tokens - 1): the mean gap between tokens once the
//              first has come (vLLM's benchmarks call it TPOT); tokens from the usage event
//              (stream_options.include_usage), as one event may carry several tokens (those that
//              arrived together, or the bytes of a character cut between tokens)
//   gap        every gap between two successive events with text (what a reader of the stream
//              sees stall, e.g. while other requests' prompts are prefilled)
// and overall, tokens/s: all tokens received / the wall time from the first request sent to the
// last answer's end. Percentiles are nearest-rank (with fewer than 100 requests, p99 is the
// largest).
//
// Prints one line of key=value figures (bench_serve.sh reads it); with -o FILE, one JSON line per
// request too ({"seed", "text", "tokens", "ttft_ms", "per_token_ms", "events"}); with -x FILE,
// the output of `infer -f` for the same seeds, every answer's text must equal its line's. Every
// request has -t SECONDS; a request that fails (an HTTP error, an error event, a stream cut short,
// fewer tokens than asked, a timeout) is counted and the first error printed; exit status 1 if any.
//
//   node dev/bench/serve_load.js URL -c CLIENTS -r ROUNDS -n TOKENS -p PROMPT [-t SECONDS] [-o FILE] [-x FILE]
//   (URL: the server's base, http://127.0.0.1:PORT/v1)
'use strict';
const fs = require('fs');

function usage(message) {
    if (message) console.error(`serve_load: ${message}`);
    console.error('usage: node dev/bench/serve_load.js URL -c CLIENTS -r ROUNDS -n TOKENS -p PROMPT [-t SECONDS] [-o FILE] [-x FILE]');
    process.exit(2);
}

function parseArgs(argv) {
    const a = { url: argv[0], clients: 0, rounds: 0, tokens: 0, prompt: null, timeout: 300, out: null, expect: null };
    if (!a.url || !/^https?:\/\//.test(a.url)) usage('the first argument is the server\'s URL, http://HOST:PORT/v1');
    for (let i = 1; i < argv.length; i += 2) {
        const flag = argv[i], value = argv[i + 1];
        if (value === undefined) usage(`${flag} needs a value`);
        const int = () => {
            const n = Number(value);
            if (!Number.isInteger(n) || n < 1) usage(`${flag} ${value}: expected a whole number, 1 or more`);
            return n;
        };
        switch (flag) {
            case '-c': a.clients = int(); break;
            case '-r': a.rounds = int(); break;
            case '-n': a.tokens = int(); break;
            case '-t': a.timeout = int(); break;
            case '-p': a.prompt = value; break;
            case '-o': a.out = value; break;
            case '-x': a.expect = value; break;
            default: usage(`unknown option ${flag}`);
        }
    }
    if (!a.clients || !a.rounds || !a.tokens || a.prompt === null) usage('-c, -r, -n and -p are needed');
    return a;
}

// The nearest-rank percentile p (0..100) of the numbers xs.
function percentile(xs, p) {
    if (xs.length === 0) return NaN;
    const sorted = Float64Array.from(xs).sort();
    return sorted[Math.max(0, Math.ceil(p / 100 * sorted.length) - 1)];
}

// One streamed completion: its figures, or throws with what went wrong.
async function complete(args, seed) {
    const body = JSON.stringify({
        prompt: args.prompt, max_tokens: args.tokens, temperature: 1, seed, stream: true,
        stream_options: { include_usage: true },
    });
    const t0 = performance.now();
    const res = await fetch(`${args.url}/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body,
        signal: AbortSignal.timeout(args.timeout * 1000),
    });
    if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${(await res.text()).slice(0, 300)}`);
    const r = { seed, text: '', tokens: -1, events: 0, first: null, last: null, gaps: [], done: false, finish: null };
    const decoder = new TextDecoder();
    let pending = '';
    const onEvent = (event, now) => {
        for (const line of event.split('\n')) {
            if (!line.startsWith('data: ')) continue;
            const data = line.slice(6);
            if (data === '[DONE]') {
                r.done = true;
                continue;
            }
            const obj = JSON.parse(data);
            if (obj.error) throw new Error(`error event: ${obj.error.message}`);
            if (obj.usage) r.tokens = obj.usage.completion_tokens;
            const choice = obj.choices && obj.choices[0];
            if (!choice) continue;
            if (choice.text !== '') {
                if (r.first === null) r.first = now;
                else r.gaps.push(now - r.last);
                r.last = now;
                r.events++;
                r.text += choice.text;
            }
            if (choice.finish_reason !== null) {
                r.finish = choice.finish_reason;
                r.last = now;  // the end of the completion's text
            }
        }
    };
    for await (const chunk of res.body) {
        const now = performance.now();
        pending += decoder.decode(chunk, { stream: true });
        let end;
        while ((end = pending.indexOf('\n\n')) >= 0) {
            onEvent(pending.slice(0, end), now);
            pending = pending.slice(end + 2);
        }
    }
    if (!r.done) throw new Error('the stream ended without "data: [DONE]"');
    if (r.first === null) throw new Error('no event with text');
    if (r.tokens !== args.tokens) {
        throw new Error(`${r.tokens} tokens (finish_reason ${r.finish}), asked for ${args.tokens}: ` +
                        'start the server with -E 0, so that end-of-text does not stop a completion');
    }
    r.ttft = r.first - t0;
    r.perToken = args.tokens > 1 ? (r.last - r.first) / (args.tokens - 1) : 0;
    r.end = performance.now();
    return r;
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    let expected = null;
    if (args.expect) {  // infer -f's answers, line k for seed k + 1
        expected = fs.readFileSync(args.expect, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l).text);
    }
    const results = [], errors = [];
    // each client opens its connection and Node loads its HTTP client (undici, on the first
    // fetch) before the clock starts: GET /health, once each
    await Promise.all(Array.from({ length: args.clients }, async () => {
        const res = await fetch(`${args.url.replace(/\/v1\/?$/, '')}/health`, { signal: AbortSignal.timeout(args.timeout * 1000) });
        await res.text();
        if (res.status !== 200) throw new Error(`GET /health: HTTP ${res.status}`);
    }));
    const start = performance.now(), cpu0 = process.cpuUsage();
    const client = async (c) => {
        for (let round = 0; round < args.rounds; round++) {
            const seed = c * args.rounds + round + 1;
            try {
                results.push(await complete(args, seed));
            } catch (e) {
                errors.push(`seed ${seed}: ${e.cause ? `${e.message} (${e.cause.message || e.cause})` : e.message}`);
            }
        }
    };
    await Promise.all(Array.from({ length: args.clients }, (_, c) => client(c)));
    const wall = (performance.now() - start) / 1000;
    const cpu = process.cpuUsage(cpu0);  // this process's, in microseconds
    let mismatched = 0;
    for (const r of expected ? results : []) {
        if (expected[r.seed - 1] === r.text) continue;
        if (mismatched++ === 0) {
            errors.push(`seed ${r.seed}: the text differs from line ${r.seed} of infer -f's answers: ` +
                        `${JSON.stringify(r.text.slice(0, 80))} vs ${JSON.stringify(String(expected[r.seed - 1]).slice(0, 80))}`);
        }
    }
    if (args.out) {
        fs.writeFileSync(args.out, results.sort((a, b) => a.seed - b.seed).map((r) => JSON.stringify({
            seed: r.seed, text: r.text, tokens: r.tokens, ttft_ms: +r.ttft.toFixed(2),
            per_token_ms: +r.perToken.toFixed(3), events: r.events,
        }) + '\n').join(''));
    }
    const tokens = results.reduce((n, r) => n + r.tokens, 0);
    const ttft = results.map((r) => r.ttft), perToken = results.map((r) => r.perToken);
    const gaps = results.flatMap((r) => r.gaps);
    const f = (x) => x.toFixed(2);
    console.log(`clients=${args.clients} requests=${args.clients * args.rounds} ` +
                `failed=${args.clients * args.rounds - results.length} mismatched=${mismatched} tokens=${tokens} ` +
                `events=${results.reduce((n, r) => n + r.events, 0)} seconds=${wall.toFixed(3)} ` +
                `cpu_seconds=${((cpu.user + cpu.system) / 1e6).toFixed(3)} ` +
                `tok_s=${(tokens / wall).toFixed(1)} ttft_p50=${f(percentile(ttft, 50))} ttft_p99=${f(percentile(ttft, 99))} ` +
                `per_token_p50=${f(percentile(perToken, 50))} per_token_p99=${f(percentile(perToken, 99))} ` +
                `gap_p50=${f(percentile(gaps, 50))} gap_p99=${f(percentile(gaps, 99))} gap_max=${f(percentile(gaps, 100))}`);
    if (errors.length > 0) {
        console.error(`serve_load: ${errors.length} problem(s); the first: ${errors[0]}`);
        process.exit(1);
    }
}

main().catch((e) => {
    console.error(`serve_load: ${e.stack || e}`);
    process.exit(1);
});
