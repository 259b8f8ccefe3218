// The web app of foliko serve: sessions, search, streamed turns, and the rest,
// over the server's own HTTP API (api.js). No build step: these modules are
// what the browser runs.

import {api, ApiError, auth, sessionPath, streamTurn} from "./api.js";
import {askedFor, fromHash} from "./opening.js";
import {Streaming, Transcript} from "./transcript.js";

const $ = (id) => document.getElementById(id);
const PAGE = 100;
const UNDO_MS = 10000;
const MAX_ATTACHED = 12 * 1024 * 1024;
const MODEL_KEY = "foliko-model";

const state = {
  sessions: [], // rows of /v1/sessions, most recent first
  hasMore: false,
  current: null, // the open session's id; null: a new one, not started yet
  record: null, // the open session as /v1/sessions/{id} gives it
  running: new Map(), // session id -> {controller, turnId, text, attachments}
  attachments: [], // [{name, size, data (base64)}]
  editing: false,
  draftSystem: null, // the system prompt of a session not started yet
};

const transcript = new Transcript($("transcript"), {
  fork: (index) => forkAt(index).catch(showError),
  regenerate: () => send({regenerate: true}),
  edit: (index) => startEdit(index),
});

// messages to the person: one status line, one error line

let noticeTimer = null;

function notice(text, action) {
  clearTimeout(noticeTimer);
  const box = $("notice");
  box.replaceChildren(text);
  if (action) {
    const undo = document.createElement("button");
    undo.type = "button";
    undo.textContent = action.label;
    undo.addEventListener("click", () => { box.replaceChildren(); action.run(); });
    box.append(" ", undo);
  }
  if (text) noticeTimer = setTimeout(() => box.replaceChildren(), action ? UNDO_MS : 6000);
}

function showError(error) {
  if (error && error.name === "AbortError") return;
  const line = $("error");
  if (!error) { line.hidden = true; line.textContent = ""; return; }
  line.textContent = String(error.message || error);
  line.hidden = false;
}

// the key, when the server wants one

auth.onNeeded = (message) => askKey(message);

let keyAsked = null;

function askKey(message) {
  if (keyAsked) { dialogError(message); return keyAsked; }
  keyAsked = openDialog({
    title: "API key", label: "API key", value: "", ok: "Use key", secret: true, error: message,
    check: async (key) => {
      auth.remember(key.trim());
      try {
        await api("/v1/sessions?limit=1");
      } catch (error) {
        auth.forget();
        throw error;
      }
    },
  }).then((key) => {
    keyAsked = null;
    if (key !== null) start();
  });
  return keyAsked;
}

// one dialog for the key, renaming and the system prompt

function dialogError(message) {
  $("dialog-error").textContent = message || "";
  $("dialog-error").hidden = !message;
}

function openDialog({title, label, value, ok = "Save", long = false, secret = false, error, check, cancel = true}) {
  const dialog = $("dialog");
  $("dialog-title").textContent = title;
  $("dialog-label").textContent = label;
  const input = long ? $("dialog-text") : $("dialog-input");
  $("dialog-text").hidden = !long;
  $("dialog-input").hidden = long;
  $("dialog-label").htmlFor = input.id;
  $("dialog-input").type = secret ? "password" : "text";
  input.value = value || "";
  $("dialog-ok").textContent = ok;
  $("dialog-cancel").hidden = !cancel;
  dialogError(error);
  return new Promise((resolve) => {
    const form = $("dialog-form");
    const finish = (result) => {
      form.onsubmit = null;
      $("dialog-cancel").onclick = null;
      dialog.oncancel = null;
      dialog.close();
      resolve(result);
    };
    form.onsubmit = async (event) => {
      event.preventDefault();
      try {
        if (check) await check(input.value);
        finish(input.value);
      } catch (failure) {
        dialogError(failure.message);
      }
    };
    $("dialog-cancel").onclick = () => finish(null);
    dialog.oncancel = (event) => { if (!cancel) event.preventDefault(); else finish(null); };
    dialog.showModal();
    input.focus();
    input.select();
  });
}

// the sessions list

const timeFormat = new Intl.RelativeTimeFormat(undefined, {numeric: "auto"});

function ago(ms) {
  const minutes = Math.round((ms - Date.now()) / 60000);
  if (Math.abs(minutes) < 60) return timeFormat.format(minutes, "minute");
  const hours = Math.round(minutes / 60);
  if (Math.abs(hours) < 24) return timeFormat.format(hours, "hour");
  return timeFormat.format(Math.round(hours / 24), "day");
}

const titleOf = (row) => row.title || row.session_id;

async function loadSessions() {
  const page = await api(`/v1/sessions?limit=${PAGE}`);
  state.sessions = page.data;
  state.hasMore = page.has_more;
  renderSessions();
}

async function moreSessions() {
  const last = state.sessions[state.sessions.length - 1];
  const page = await api(`/v1/sessions?limit=${PAGE}&after=${encodeURIComponent(last.session_id)}`);
  state.sessions = state.sessions.concat(page.data);
  state.hasMore = page.has_more;
  renderSessions();
}

// The rows as families, in the order of their most recent member: each fork
// under the session it was forked from, when that one is listed too.
function families(rows) {
  const listed = new Map(rows.map((row) => [row.session_id, row]));
  const parentOf = (row) => (listed.has(row.forked_from) ? row.forked_from : null);
  const forks = new Map();
  for (const row of rows) {
    const parent = parentOf(row);
    if (parent !== null) forks.set(parent, [...(forks.get(parent) || []), row]);
  }
  const placed = new Set();
  const family = (row) => {
    placed.add(row.session_id);
    const under = (forks.get(row.session_id) || []).filter((fork) => !placed.has(fork.session_id));
    return {row, forks: under.map(family)};
  };
  const out = [];
  for (const row of rows) {
    let top = row;
    const seen = new Set([top.session_id]); // forks that loop are families of their own
    while (parentOf(top) !== null && !seen.has(parentOf(top))) {
      top = listed.get(parentOf(top));
      seen.add(top.session_id);
    }
    if (!placed.has(top.session_id)) out.push(family(top));
    if (!placed.has(row.session_id)) out.push(family(row));
  }
  return out;
}

function sessionItem({row, forks}) {
  const item = document.createElement("li");
  item.append(sessionLink(row));
  if (forks.length) {
    const list = document.createElement("ul");
    list.className = "forks";
    list.setAttribute("aria-label", `Forks of ${titleOf(row)}`);
    list.append(...forks.map(sessionItem));
    item.append(list);
  }
  return item;
}

function renderSessions() {
  $("sessions").replaceChildren(...families(state.sessions).map(sessionItem));
  $("more-sessions").hidden = !state.hasMore;
}

function sessionLink(row) {
  const link = document.createElement("a");
  link.href = "#s=" + encodeURIComponent(row.session_id);
  link.className = "session";
  link.dataset.id = row.session_id;
  if (row.session_id === state.current) link.setAttribute("aria-current", "page");
  const name = document.createElement("span");
  name.className = "name";
  name.textContent = titleOf(row);
  const when = document.createElement("span");
  when.className = "when";
  when.textContent = row.damaged ? "damaged" : ago(row.updated_at);
  link.title = row.title ? `${row.title} (${row.session_id})` : row.session_id;
  link.append(name, when);
  link.addEventListener("click", (event) => {
    event.preventDefault();
    openSession(row.session_id).catch(showError);
  });
  return link;
}

// search

let searchTimer = null;
let searchSeq = 0;

function onSearchInput() {
  clearTimeout(searchTimer);
  const query = $("search").value.trim();
  if (!query) { closeSearch(); return; }
  searchTimer = setTimeout(() => runSearch(query).catch(showError), 200);
}

function closeSearch() {
  $("search-results").hidden = true;
  $("search-results").replaceChildren();
  $("sessions").hidden = false;
  $("more-sessions").hidden = !state.hasMore;
}

function marked(snippet, matches) {
  const out = document.createDocumentFragment();
  let last = 0;
  for (const [start, end] of matches) {
    out.append(snippet.slice(last, start));
    const mark = document.createElement("mark");
    mark.textContent = snippet.slice(start, end);
    out.append(mark);
    last = end;
  }
  out.append(snippet.slice(last));
  return out;
}

async function runSearch(query) {
  const mine = ++searchSeq;
  let found;
  try {
    found = await api("/v1/search?limit=30&q=" + encodeURIComponent(query));
  } catch (error) {
    if (error.status === 400) {
      showResults([], error.message);
      return;
    }
    throw error;
  }
  if (mine !== searchSeq) return; // a later query answered first
  showResults(found.data, found.data.length ? "" : `Nothing matches “${query}”.`);
}

function showResults(hits, message) {
  const box = $("search-results");
  const items = hits.map((hit) => {
    const link = document.createElement("a");
    link.className = "hit";
    link.href = `#s=${encodeURIComponent(hit.session_id)}&m=${hit.seq}`;
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = `${hit.title || hit.session_id} · ${hit.role}`;
    const snippet = document.createElement("span");
    snippet.className = "snippet";
    snippet.append(marked(hit.snippet, hit.matches));
    link.append(name, snippet);
    link.addEventListener("click", (event) => {
      event.preventDefault();
      openSession(hit.session_id, hit.seq).catch(showError);
    });
    return link;
  });
  const heading = document.createElement("p");
  heading.className = "results-head";
  heading.textContent = message || `${hits.length} match${hits.length === 1 ? "" : "es"}`;
  box.replaceChildren(heading, ...items);
  box.hidden = false;
  $("sessions").hidden = true;
  $("more-sessions").hidden = true;
}

// opening a session, or a new one

function setHash(id, at) {
  const hash = id === null ? "" : `#s=${encodeURIComponent(id)}${at !== null && at !== undefined ? "&m=" + at : ""}`;
  if (location.hash !== hash) history.replaceState(null, "", hash || location.pathname);
}

function showHeader() {
  const row = state.sessions.find((r) => r.session_id === state.current);
  const title = state.record?.metadata?.title || row?.title || state.current;
  $("title").textContent = state.current === null ? "New session" : title;
  $("session-id").textContent = state.current !== null && title !== state.current ? state.current : "";
  $("rename").disabled = $("delete").disabled = state.current === null;
  document.title = state.current === null ? "foliko" : `${title} · foliko`;
  for (const link of document.querySelectorAll("a.session")) {
    if (link.dataset.id === state.current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function showComposerState() {
  const running = state.running.get(state.current);
  $("stop").hidden = !running;
  $("send").hidden = Boolean(running);
  $("editing").hidden = !state.editing;
}

function closeSidebar() {
  document.body.classList.remove("sidebar-open");
  $("open-sidebar").setAttribute("aria-expanded", "false");
}

const narrow = () => matchMedia("(max-width: 720px)").matches;

async function openSession(id, at = null) {
  const record = await (askedFor(id) || api(sessionPath(id)));
  state.current = id;
  state.record = record;
  state.editing = false;
  $("welcome").hidden = true;
  transcript.show(record.messages, at);
  showHeader();
  showComposerState();
  setHash(id, at);
  showError(null);
  closeSidebar();
  if (at === null && !narrow()) $("message").focus({preventScroll: true}); // a phone's keyboard stays down
  if (state.running.has(id)) notice("A turn is running in this session.");
}

function newSession() {
  state.current = null;
  state.record = null;
  state.editing = false;
  state.draftSystem = null;
  transcript.show([]);
  $("welcome").hidden = false;
  showHeader();
  showComposerState();
  setHash(null);
  showError(null);
  closeSidebar();
  $("message").focus();
}

function newId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return "conv_" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// attachments

function renderChips() {
  const chips = state.attachments.map((file, index) => {
    const chip = document.createElement("span");
    chip.className = "chip";
    chip.textContent = `${file.name} (${file.size.toLocaleString()} bytes) `;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "icon";
    remove.textContent = "✕";
    remove.setAttribute("aria-label", `Remove ${file.name}`);
    remove.addEventListener("click", () => { state.attachments.splice(index, 1); renderChips(); });
    chip.append(remove);
    return chip;
  });
  $("chips").replaceChildren(...chips);
}

function readFile(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(new Error(`could not read ${file.name}`));
    reader.readAsDataURL(file);
  });
}

async function attach(files) {
  for (const file of files) {
    const total = state.attachments.reduce((sum, f) => sum + f.size, 0) + file.size;
    if (total > MAX_ATTACHED) {
      showError(new Error(`${file.name} makes the attachments over ${MAX_ATTACHED / 1048576} MB: attach less`));
      continue;
    }
    const name = file.name || `pasted.${(file.type.split("/")[1] || "bin")}`;
    state.attachments.push({name, size: file.size, data: await readFile(file)});
  }
  renderChips();
}

// turns

function startEdit(index) {
  const message = state.record.messages[index];
  state.editing = true;
  $("message").value = String(message.content ?? "");
  showComposerState();
  $("message").focus();
}

function cancelEdit() {
  state.editing = false;
  $("message").value = "";
  showComposerState();
}

async function send({regenerate = false} = {}) {
  const text = $("message").value;
  const editing = state.editing && !regenerate;
  if (!regenerate && !text.trim() && !state.attachments.length) return;
  const creating = state.current === null;
  const sessionId = creating ? newId() : state.current;
  if (state.running.has(sessionId)) return;
  const body = {model: $("model").value || null};
  if (regenerate || editing) body.regenerate = true;
  if (!regenerate) body.message = text;
  if (state.attachments.length && !regenerate) body.attachments = state.attachments.map(({name, data}) => ({name, data}));
  if (creating) {
    body.create = true;
    if (state.draftSystem) body.system = state.draftSystem;
  }
  const run = {controller: new AbortController(), turnId: null, text, attachments: state.attachments, editing, regenerate};
  state.running.set(sessionId, run);
  showError(null);
  if (!regenerate) { // given back if nothing of the turn is saved
    $("message").value = "";
    state.attachments = [];
    renderChips();
  }
  if (creating) {
    state.current = sessionId;
    state.record = {session_id: sessionId, messages: [], metadata: {}};
    $("welcome").hidden = true;
    showHeader();
    setHash(sessionId);
  }
  const replaced = regenerate || editing ? lastTurnStart() : null;
  if (replaced !== null) transcript.truncate(regenerate ? replaced + 1 : replaced);
  transcript.renderToEnd();
  if (!regenerate) transcript.pending({role: "user", content: text, attachments: []});
  const reply = transcript.pending({role: "assistant", content: ""});
  const streaming = new Streaming(transcript, reply);
  state.editing = false;
  showComposerState();
  let outcome = null;
  try {
    await streamTurn(sessionId, body, (event) => {
      if (event.type === "waiting") notice(`Session busy: ${event.message}.`);
      else if (event.type === "started") { run.turnId = event.turn_id; notice(""); }
      else if (event.type === "delta") streaming.add(event.text);
      else if (event.type === "tool_call") streaming.call(event.name, event.arguments);
      else if (event.type === "done" || event.type === "cancelled" || event.type === "error") outcome = event;
    }, run.controller.signal);
  } catch (error) {
    outcome = {type: "error", error};
  }
  state.running.delete(sessionId);
  await finishTurn(sessionId, run, outcome, creating);
}

function lastTurnStart() {
  const messages = state.record.messages;
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i].role === "user") return i;
  return null;
}

async function finishTurn(sessionId, run, outcome, creating) {
  const here = state.current === sessionId;
  if (outcome && outcome.type === "done") {
    if (here) {
      state.record.messages = state.record.messages.slice(0, outcome.position).concat(outcome.messages);
      transcript.settle(outcome.position, outcome.messages);
    }
    await loadSessions().catch(showError);
    if (here) showHeader();
    showComposerState();
    return;
  }
  // nothing of the turn was saved: give back what was typed, show what is stored
  if (here && !run.regenerate) {
    $("message").value = run.text;
    state.attachments = run.attachments;
    state.editing = run.editing;
    renderChips();
  }
  if (!outcome || outcome.type === "cancelled") {
    notice("Stopped: nothing of that turn was saved.");
  } else {
    const error = outcome.error || {};
    const stopped = error.name === "AbortError";
    if (stopped) notice("Stopped: nothing of that turn was saved.");
    else if (here) showError(new Error(`Not sent: ${error.message}`));
  }
  if (here) {
    if (creating) {
      try {
        await openSession(sessionId);
      } catch {
        newSession();
        $("message").value = run.text;
        state.attachments = run.attachments;
        renderChips();
      }
    } else {
      await reloadCurrent();
    }
  }
  showComposerState();
}

async function reloadCurrent() {
  try {
    state.record = await api(sessionPath(state.current));
    transcript.show(state.record.messages);
  } catch (error) {
    showError(error);
  }
}

async function stop() {
  const run = state.running.get(state.current);
  if (!run) return;
  if (run.turnId) {
    try {
      await api(`${sessionPath(state.current)}/turns/${encodeURIComponent(run.turnId)}/cancel`, {method: "POST"});
    } catch (error) {
      if (!(error instanceof ApiError) || error.status !== 404) showError(error);
    }
  }
  run.controller.abort();
}

// the session's own actions

async function forkAt(index) {
  const source = state.current;
  const to = newId();
  const title = `${$("title").textContent} (fork)`;
  await api(`${sessionPath(source)}/fork`, {method: "POST", body: {to, upto: index + 1}});
  await api(sessionPath(to), {method: "PATCH", body: {title}});
  await loadSessions();
  await openSession(to);
  notice(`Forked into “${title}” at message ${index + 1}.`);
}

async function rename() {
  const current = state.current;
  const title = await openDialog({
    title: "Rename session", label: "Name", value: $("title").textContent,
    check: async (value) => {
      if (!value.trim()) throw new Error("give the session a name");
      await api(sessionPath(current), {method: "PATCH", body: {title: value}});
    },
  });
  if (title === null) return;
  state.record.metadata.title = title.trim();
  await loadSessions();
  showHeader();
}

async function editSystemPrompt() {
  const current = state.current;
  const prompt = await openDialog({
    title: "System prompt", label: "This session's system prompt (empty: the default)",
    value: current === null ? state.draftSystem || "" : state.record.metadata.system_prompt || "",
    long: true,
    check: async (value) => {
      if (current !== null) await api(sessionPath(current), {method: "PATCH", body: {system_prompt: value || null}});
    },
  });
  if (prompt === null) return;
  if (current === null) state.draftSystem = prompt || null;
  else state.record.metadata.system_prompt = prompt || null;
  notice(prompt ? "System prompt saved: later turns use it." : "System prompt removed: the default is used.");
}

async function remove() {
  const id = state.current;
  const title = $("title").textContent;
  const answer = await api(sessionPath(id), {method: "DELETE"});
  newSession();
  await loadSessions();
  if (answer.in_trash) {
    notice(`Deleted “${title}”.`, {
      label: "Undo",
      run: () => undo(id).catch(showError),
    });
  } else {
    notice(`Deleted “${title}”.`);
  }
}

async function undo(id) {
  await api(`/v1/trash/${encodeURIComponent(id)}/restore`, {method: "POST"});
  await loadSessions();
  await openSession(id);
  notice("Restored.");
}

// models

async function loadModels() {
  const models = await api("/v1/models");
  const select = $("model");
  const chosen = localStorage.getItem(MODEL_KEY) || "";
  for (const model of models.data) {
    const option = document.createElement("option");
    option.value = option.textContent = model.id;
    select.append(option);
  }
  select.value = [...select.options].some((o) => o.value === chosen) ? chosen : "";
}

// wiring

function wire() {
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send().catch(showError);
  });
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (!state.running.has(state.current)) $("composer").requestSubmit();
    }
  });
  $("message").addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files || [])];
    if (files.length) {
      event.preventDefault();
      attach(files).catch(showError);
    }
  });
  $("stop").addEventListener("click", () => stop().catch(showError));
  $("new").addEventListener("click", newSession);
  $("rename").addEventListener("click", () => rename().catch(showError));
  $("delete").addEventListener("click", () => remove().catch(showError));
  $("system-prompt").addEventListener("click", () => editSystemPrompt().catch(showError));
  $("cancel-edit").addEventListener("click", cancelEdit);
  $("attach").addEventListener("click", () => $("files").click());
  $("files").addEventListener("change", () => {
    attach([...$("files").files]).catch(showError);
    $("files").value = "";
  });
  $("model").addEventListener("change", () => localStorage.setItem(MODEL_KEY, $("model").value));
  $("search").addEventListener("input", onSearchInput);
  $("search").addEventListener("keydown", (event) => {
    if (event.key === "Escape") { $("search").value = ""; closeSearch(); }
  });
  $("more-sessions").addEventListener("click", () => moreSessions().catch(showError));
  $("open-sidebar").addEventListener("click", () => {
    document.body.classList.add("sidebar-open");
    $("open-sidebar").setAttribute("aria-expanded", "true");
    $("search").focus();
  });
  $("close-sidebar").addEventListener("click", closeSidebar);
  const main = $("main");
  main.addEventListener("dragover", (event) => {
    if ([...event.dataTransfer.types].includes("Files")) {
      event.preventDefault();
      main.classList.add("dropping");
    }
  });
  main.addEventListener("dragleave", (event) => {
    if (event.target === main || !main.contains(event.relatedTarget)) main.classList.remove("dropping");
  });
  main.addEventListener("drop", (event) => {
    main.classList.remove("dropping");
    if (event.dataTransfer.files.length) {
      event.preventDefault();
      attach([...event.dataTransfer.files]).catch(showError);
    }
  });
  document.addEventListener("keydown", (event) => {
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement?.tagName || "");
    if ((event.key === "k" && (event.ctrlKey || event.metaKey)) || (event.key === "/" && !typing)) {
      event.preventDefault();
      document.body.classList.add("sidebar-open");
      $("search").focus();
      $("search").select();
    } else if (event.key === "Escape" && !$("dialog").open && state.running.has(state.current)) {
      event.preventDefault();
      stop().catch(showError);
    }
  });
}

window.addEventListener("hashchange", () => { // a link to a session, or back and forward
  const wanted = fromHash();
  if (wanted) openSession(wanted.id, wanted.at).catch(showError);
  else newSession();
});

async function start() {
  const wanted = fromHash();
  const opening = wanted && openSession(wanted.id, wanted.at).catch((error) => { // while the rest loads
    if (error.status === 401) return; // the key dialog is open
    newSession();
    showError(error);
  });
  try {
    await Promise.all([loadSessions(), loadModels()]);
  } catch (error) {
    if (error.status === 401) return; // the key dialog is open
    showError(error);
    return;
  }
  if (opening) await opening;
  else if (state.current === null) newSession();
  document.documentElement.dataset.readyAt = String(Math.round(performance.now()));
  document.documentElement.dataset.ready = "true";
}

wire();
showHeader();
start();
