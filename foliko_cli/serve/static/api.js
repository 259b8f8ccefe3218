// foliko's own HTTP API, as the page uses it: JSON in and out, the API key
// (kept in this origin's localStorage), the streamed turns of /v1/sessions.

const KEY = "foliko-api-key";

export class ApiError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const auth = {
  key: () => localStorage.getItem(KEY),
  remember: (key) => localStorage.setItem(KEY, key),
  forget: () => localStorage.removeItem(KEY),
  onNeeded: null, // called with a message when the server asks for a key
};

function headers() {
  const h = {"content-type": "application/json"};
  const key = auth.key();
  if (key) h.authorization = "Bearer " + key;
  return h;
}

const UNREACHABLE = "could not reach the foliko server: check that foliko serve is running, then try again";

async function failure(response) {
  let body = {};
  try { body = await response.json(); } catch { /* not JSON */ }
  const error = body.error || {};
  if (response.status === 401) {
    const wrong = auth.key() !== null;
    auth.forget();
    const message = wrong
      ? "the API key was refused: enter a key this server was given"
      : "this server needs an API key: enter yours";
    if (auth.onNeeded) auth.onNeeded(message);
    return new ApiError(message, 401, "invalid_api_key");
  }
  return new ApiError(error.message || `${response.status} ${response.statusText}`, response.status, error.code);
}

export async function api(path, {method = "GET", body, signal} = {}) {
  let response;
  try {
    response = await fetch(path, {
      method, headers: headers(), signal,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(UNREACHABLE, 0, "unreachable");
  }
  if (!response.ok) throw await failure(response);
  return response.json();
}

export const sessionPath = (id) => "/v1/sessions/" + encodeURIComponent(id);

// Run one turn; onEvent gets each event (waiting, started, delta, tool_call,
// tool_result, done, cancelled, error). Resolves when the stream ends.
export async function streamTurn(sessionId, body, onEvent, signal) {
  let response;
  try {
    response = await fetch(sessionPath(sessionId) + "/turns", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(UNREACHABLE, 0, "unreachable");
  }
  if (!response.ok) throw await failure(response);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new ApiError("the connection to the server broke off: reload to see what was saved", 0, "cut");
    }
    const {done, value} = chunk;
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6));
      if (data.length) onEvent(JSON.parse(data.join("\n")));
    }
  }
}
