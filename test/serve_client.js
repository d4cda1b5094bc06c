// test/serve_client.js: OpenAI's own client library (npm openai) against infer --serve, as
// test_serve.sh runs it: a client that speaks the API as OpenAI's servers do must work unchanged.
//   node test/serve_client.js http://127.0.0.1:PORT/v1 MODEL [ANSWER]
// Asks for one greedy completion at once and streamed (the same text, the same usage), lists the
// models, and makes two bad requests (BadRequestError naming the field; NotFoundError for another
// model). ANSWER: the JSON answer curl got for the same request, whose text must be the same too.
// Prints a line per check; exits 1 if one fails.
const fs = require("fs");
const { OpenAI } = require("openai");

const [baseURL, model, answerFile] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 30000 });
let failed = 0;
function check(ok, what, detail) {
  console.log(ok ? `ok    openai client: ${what}` : `FAIL: openai client: ${what}: ${detail}`);
  if (!ok) failed = 1;
}

// the error the client raises for a request, or null
async function errorOf(request) {
  try {
    await client.completions.create(request);
    return null;
  } catch (e) {
    return e;
  }
}

async function main() {
  const request = { model, prompt: "The history of the city", max_tokens: 24, temperature: 0 };
  const whole = await client.completions.create(request);
  const text = whole.choices[0].text;
  check(whole.object === "text_completion" && whole.choices.length === 1 && whole.choices[0].finish_reason === "length" &&
        whole.usage.completion_tokens === 24, "completions.create: one choice of 24 tokens", JSON.stringify(whole));
  if (answerFile) {
    const curl = JSON.parse(fs.readFileSync(answerFile, "utf8")).choices[0].text;
    check(text === curl, "the same text as curl got", `${JSON.stringify(text)} vs ${JSON.stringify(curl)}`);
  }

  const stream = await client.completions.create({ ...request, stream: true, stream_options: { include_usage: true } });
  let streamed = "", chunks = 0, usage = null, finish = null;
  for await (const chunk of stream) {
    chunks++;
    for (const c of chunk.choices) {
      streamed += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  check(streamed === text && finish === "length", `stream: ${chunks} chunks, the same text`,
        `${JSON.stringify(streamed)} vs ${JSON.stringify(text)}, finish ${finish}`);
  check(usage !== null && usage.total_tokens === whole.usage.total_tokens, "stream: include_usage gives the usage",
        JSON.stringify(usage));

  const models = await client.models.list();
  check(models.data.map((m) => m.id).join() === model, "models.list", JSON.stringify(models.data));

  const bad = await errorOf({ model, prompt: "x", max_tokens: -1 });
  check(bad instanceof OpenAI.BadRequestError && bad.status === 400 && bad.param === "max_tokens",
        "max_tokens -1: BadRequestError (400) naming max_tokens", String(bad));
  const other = await errorOf({ model: "gpt-4", prompt: "x" });
  check(other instanceof OpenAI.NotFoundError && other.status === 404 && other.code === "model_not_found",
        "another model: NotFoundError (404), code model_not_found", String(other));
}

main().then(() => process.exit(failed), (e) => {
  console.log(`FAIL: openai client: ${e}`);
  process.exit(1);
});
