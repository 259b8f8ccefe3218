// The session the page's address names (/#s=ID, &m=N: at message N), asked
// for as soon as the page starts: it is on its way while the rest loads.

import {api, sessionPath} from "./api.js";

export function fromHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  const id = params.get("s");
  const at = params.get("m");
  return id ? {id, at: at !== null && /^\d+$/.test(at) ? Number(at) : null} : null;
}

let asked = fromHash();
if (asked) {
  asked.record = api(sessionPath(asked.id));
  asked.record.catch(() => {}); // a failure is shown when the session is opened
}

// the answer for session ``id`` when it was asked for at the start, once; else null
export function askedFor(id) {
  if (asked?.id !== id) return null;
  const {record} = asked;
  asked = null;
  return record;
}
