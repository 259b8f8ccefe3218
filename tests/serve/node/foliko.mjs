// What every script shares: foliko's URL, a fetch that records each exchange,
// and `main`, which prints the scenario's result (or its error) as one JSON line.
import { appendFileSync } from "node:fs";

export const baseURL = process.env.FOLIKO_BASE_URL;
export const apiKey = "none";
const exchangeLog = process.env.FOLIKO_HTTP_LOG;
const recording = [];

function record(entry) {
  if (exchangeLog) appendFileSync(exchangeLog, JSON.stringify(entry) + "\n");
}

/** fetch, with every request and its whole answer appended to FOLIKO_HTTP_LOG. */
export async function loggingFetch(input, init = {}) {
  const entry = {
    method: init.method ?? (input instanceof Request ? input.method : "GET"),
    url: String(input instanceof Request ? input.url : input),
    body: typeof init.body === "string" ? init.body : init.body == null ? null : "<not text>",
  };
  let response;
  try {
    response = await fetch(input, init);
  } catch (error) {
    record({ ...entry, error: String(error) });
    throw error;
  }
  entry.status = response.status;
  recording.push(
    response
      .clone()
      .text()
      .then(
        (text) => record({ ...entry, response: text }),
        (error) => record({ ...entry, response_error: String(error) }),
      ),
  );
  return response;
}

function describe(error) {
  return {
    name: error?.constructor?.name ?? typeof error,
    message: String(error?.message ?? error),
    status: error?.status ?? error?.statusCode ?? null,
    body: error?.error ?? error?.responseBody ?? null,
    cause: error?.cause ? String(error.cause?.message ?? error.cause) : null,
  };
}

/** Run the scenario named by the first argument; print its result as JSON. */
export async function main(scenarios) {
  const [name, ...args] = process.argv.slice(2);
  const scenario = scenarios[name];
  let output;
  if (!scenario) {
    output = { error: { name: "UsageError", message: `no scenario ${name}` } };
  } else {
    try {
      output = await scenario(...args);
    } catch (error) {
      output = { error: describe(error) };
    }
  }
  await Promise.allSettled(recording);
  if (output?.error) process.exitCode = 1;
  process.stdout.write(JSON.stringify(output) + "\n");
}
