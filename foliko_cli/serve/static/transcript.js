// The messages of the open session, a window of them at a time: more are
// added as the reader scrolls towards either end of the window, and those
// furthest from the screen leave it (a session of thousands of messages opens
// and scrolls as fast as a short one; the browser skips laying out those out
// of view: content-visibility in app.css). A message's body is rendered as
// it comes near the screen (those on it at once), and a long one shows its
// start (long.js).

import {renderText} from "./long.js";
import {copyText} from "./markdown.js";

const CHUNK = 40;
const WINDOW = 3 * CHUNK; // messages in the page at most
const CONTEXT = 5; // messages shown before a search hit
const MARGIN = 600; // px from an end of the rendered messages that renders more
const NEAR = "1000px 0px"; // how near the screen a message's body is rendered
const SCREENFUL = 12000; // characters of messages rendered at once when a session opens

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(label, onClick, name) {
  const node = el("button", "action", label);
  node.type = "button";
  if (name) node.setAttribute("aria-label", name);
  node.addEventListener("click", onClick);
  return node;
}

function seconds(ms) {
  return ms >= 10000 ? `${Math.round(ms / 1000)} s` : `${(ms / 1000).toFixed(2)} s`;
}

const today = new Intl.DateTimeFormat(undefined, {hour: "numeric", minute: "2-digit"});
const thisYear = new Intl.DateTimeFormat(undefined, {
  month: "short", day: "numeric", hour: "numeric", minute: "2-digit",
});
const anyDay = new Intl.DateTimeFormat(undefined, {dateStyle: "medium", timeStyle: "short"});
const full = new Intl.DateTimeFormat(undefined, {dateStyle: "full", timeStyle: "medium"});

// when a message was written: the time alone today, the day too this year
function timeOf(ms) {
  const node = el("time", "when");
  const at = new Date(ms);
  const now = new Date();
  const format = at.toDateString() === now.toDateString() ? today
    : at.getFullYear() === now.getFullYear() ? thisYear : anyDay;
  node.dateTime = at.toISOString();
  node.textContent = format.format(at);
  node.title = full.format(at);
  return node;
}

// ``alias``: the model's name as it was picked, when it is not the model's own
export function usageLine(message, alias) {
  const parts = [];
  if (message.model) {
    parts.push(alias && alias !== message.model ? `${alias} (${message.model})` : message.model);
  }
  const usage = message.usage || {};
  if (typeof usage.input_tokens === "number") parts.push(`${usage.input_tokens.toLocaleString()} in`);
  if (typeof usage.output_tokens === "number") parts.push(`${usage.output_tokens.toLocaleString()} out`);
  if (typeof message.cost === "number") parts.push(`$${message.cost.toFixed(4)}`);
  if (typeof message.duration_ms === "number") parts.push(seconds(message.duration_ms));
  return parts.join(" · ");
}

function attachmentsOf(message) {
  const box = el("div", "attachments");
  for (const part of message.attachments || []) {
    if (part.type === "image" && part.data && /^image\/(png|jpeg|gif|webp)$/.test(part.media_type)) {
      const image = el("img", "thumb");
      image.alt = part.name || "image";
      image.src = `data:${part.media_type};base64,${part.data}`;
      box.append(image);
    } else {
      box.append(el("span", "chip", `${part.name} (${(part.size || 0).toLocaleString()} bytes)`));
    }
  }
  return box;
}

// the message's content, attachments and tool calls into ``body``; ``view``:
// how a long one is shown (see long.js's renderText)
export function fillBody(body, message, view = {}) {
  const open = body.querySelector(":scope > details")?.open; // filled again: as it was
  body.replaceChildren();
  if (message.role === "tool") {
    const details = el("details", "tool-output");
    details.open = Boolean(open);
    details.append(el("summary", null, `Result of ${message.name || "a tool"}`));
    renderText(details, String(message.content ?? ""), {...view, plain: true});
    body.append(details);
    return;
  }
  if (message.content) renderText(body, String(message.content), view);
  for (const call of message.tool_calls || []) {
    const args = typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments);
    body.append(el("div", "tool-call", `Called ${call.name}(${args})`));
  }
  if (message.attachments && message.attachments.length) body.append(attachmentsOf(message));
}

export class Transcript {
  // actions: {fork(index), regenerate(), edit(index)}
  constructor(scroller, actions) {
    this.scroller = scroller;
    this.actions = actions;
    this.messages = [];
    this.expanded = new Set(); // the long messages shown all
    this.first = 0;
    this.end = 0; // messages [first, end) are in the page
    this.list = el("div", "messages");
    this.earlier = button("Show earlier messages", () => this.renderEarlier());
    this.earlier.classList.add("more");
    this.later = button("Show later messages", () => this.renderLater());
    this.later.classList.add("more");
    scroller.replaceChildren(this.earlier, this.list, this.later);
    this.checking = false;
    scroller.addEventListener("scroll", () => this.schedule(), {passive: true});
    this.near = new IntersectionObserver((entries) => {
      for (const {target, isIntersecting} of entries) {
        if (isIntersecting) this.fillNow(target);
      }
    }, {root: scroller, rootMargin: NEAR});
  }

  // near an end of what is rendered: render more there (once a frame at most)
  schedule() {
    if (this.checking) return;
    this.checking = true;
    requestAnimationFrame(() => {
      this.checking = false;
      const s = this.scroller;
      if (this.first > 0 && s.scrollTop < MARGIN) this.renderEarlier();
      else if (this.end < this.messages.length && s.scrollHeight - s.scrollTop - s.clientHeight < MARGIN) {
        this.renderLater();
      }
    });
  }

  // Show ``messages``: their end, or around message ``at`` (which is marked).
  show(messages, at = null) {
    this.messages = messages;
    this.expanded.clear();
    this.near.disconnect();
    this.list.replaceChildren();
    if (at === null || at >= messages.length) {
      this.end = messages.length;
      this.first = Math.max(0, this.end - CHUNK);
    } else {
      this.first = Math.max(0, at - CONTEXT);
      this.end = Math.min(messages.length, at + CHUNK);
    }
    this.list.append(...this.range(this.first, this.end, this.onScreen(at)));
    this.refreshEnds();
    if (at === null) {
      this.toBottom();
    } else {
      const target = this.article(at);
      if (target) {
        target.classList.add("hit");
        target.tabIndex = -1;
        target.scrollIntoView({block: "center"});
        target.focus({preventScroll: true});
      }
    }
    this.schedule();
  }

  // the messages [from, to) as articles, the bodies of those in [now[0],
  // now[1]) rendered at once (the others' as they come near the screen)
  range(from, to, now = [0, 0]) {
    const nodes = [];
    for (let i = from; i < to; i++) {
      nodes.push(this.articleFor(this.messages[i], i, i >= now[0] && i < now[1]));
    }
    return nodes;
  }

  // the messages on screen once the window is shown: around ``at``, or those
  // at its end that fill a screen or so
  onScreen(at) {
    if (at !== null && at < this.messages.length) {
      return [Math.max(this.first, at - CONTEXT), Math.min(this.end, at + CONTEXT)];
    }
    let from = this.end;
    for (let shown = 0; from > this.first && shown < SCREENFUL; from--) {
      shown += Math.min(String(this.messages[from - 1].content ?? "").length, 2 * SCREENFUL);
    }
    return [from, this.end];
  }

  takeOut(article) {
    if (!article) return;
    this.near.unobserve(article);
    article.remove();
  }

  fillNow(article) {
    this.near.unobserve(article);
    article.renderBody?.();
    article.renderBody = null;
  }

  refreshEnds() {
    this.earlier.hidden = this.first === 0;
    this.later.hidden = this.end >= this.messages.length;
    this.markLastTurn();
  }

  // Change the page with what is on screen staying where it is (the browser's
  // scroll anchoring does not act at the top of the scroller)
  keepInPlace(change) {
    const top = this.scroller.getBoundingClientRect().top;
    const anchor = [...this.list.children].find((node) => node.getBoundingClientRect().bottom > top);
    const before = anchor?.getBoundingClientRect().top;
    change();
    if (anchor?.isConnected) this.scroller.scrollTop += anchor.getBoundingClientRect().top - before;
  }

  renderEarlier() {
    if (this.first === 0) return;
    const from = Math.max(0, this.first - CHUNK);
    this.keepInPlace(() => {
      this.list.prepend(...this.range(from, this.first));
      this.first = from;
      this.drop(this.first + WINDOW, this.end); // the furthest below
    });
    this.refreshEnds();
    this.schedule();
  }

  renderLater() {
    if (this.end >= this.messages.length) return;
    const to = Math.min(this.messages.length, this.end + CHUNK);
    this.keepInPlace(() => {
      this.list.append(...this.range(this.end, to));
      this.end = to;
      this.drop(this.first, this.end - WINDOW); // the furthest above
    });
    this.refreshEnds();
    this.schedule();
  }

  // take messages [from, to) out of the page: the window's first or last ones
  drop(from, to) {
    if (from >= to) return;
    for (let i = from; i < to; i++) this.takeOut(this.article(i));
    if (from === this.first) this.first = to;
    else this.end = from;
  }

  // the window at the session's end (before a turn adds to it)
  renderToEnd() {
    if (this.end < this.messages.length) this.show(this.messages);
  }

  article(index) {
    return this.list.querySelector(`article[data-index="${index}"]`);
  }

  nearBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  toBottom() {
    // again once the messages coming into view have their real heights (until
    // they are laid out, content-visibility gives them an estimate)
    const s = this.scroller;
    s.scrollTop = s.scrollHeight;
    requestAnimationFrame(() => {
      s.scrollTop = s.scrollHeight;
      requestAnimationFrame(() => { s.scrollTop = s.scrollHeight; });
    });
  }

  articleFor(message, index, now = true) {
    const role = message.role || "assistant";
    const article = el("article", "message " + role);
    article.dataset.role = role;
    if (index !== null) article.dataset.index = index;
    article.setAttribute("aria-label", `${role} message${index !== null ? " " + (index + 1) : ""}`);
    const body = el("div", "body");
    article.append(body);
    article.renderBody = () => this.fill(body, message, index);
    if (now) { // on screen at once: laid out at once too, so the window lands where it should
      this.fillNow(article);
      article.style.contentVisibility = "visible";
    } else {
      this.near.observe(article);
    }
    const footer = el("div", "footer");
    const about = el("span", "about");
    if (typeof message.created_at === "number") about.append(timeOf(message.created_at));
    const usage = role === "assistant" ? usageLine(message, index === null ? null : this.aliasOf(index)) : "";
    about.append(el("span", "usage", usage));
    footer.append(about);
    const tools = el("div", "actions");
    if (index !== null) {
      tools.append(button("Copy", (event) => copyText(String(message.content ?? ""), event.currentTarget),
        `Copy message ${index + 1}`));
      tools.append(button("Fork", () => this.actions.fork(index), `Fork from message ${index + 1}`));
    }
    footer.append(tools);
    article.append(footer);
    return article;
  }

  fill(body, message, index) {
    const refill = () => { // its other button takes the focus
      this.fill(body, message, index);
      body.querySelector("button.more")?.focus({preventScroll: true});
    };
    fillBody(body, message, index === null ? {} : {
      expanded: this.expanded.has(index),
      expand: () => {
        this.expanded.add(index);
        refill();
      },
      collapse: () => {
        this.expanded.delete(index);
        refill();
        body.parentElement.scrollIntoView({block: "nearest"});
      },
      scroller: this.scroller,
      name: `message ${index + 1}`,
    });
  }

  // the name the model of message ``index``'s turn was picked by (kept on the
  // turn's first message: the messages of a turn share its request_id)
  aliasOf(index) {
    const turn = this.messages[index].request_id;
    let first = index;
    while (turn && first > 0 && this.messages[first - 1].request_id === turn) first--;
    return this.messages[first].model_alias || null;
  }

  // Regenerate on the last reply and Edit on the last user message
  markLastTurn() {
    for (const node of this.list.querySelectorAll(".last-turn")) node.remove();
    if (this.end < this.messages.length) return;
    let user = -1;
    for (let i = this.messages.length - 1; i >= 0; i--) {
      if (this.messages[i].role === "user") { user = i; break; }
    }
    if (user < 0) return;
    const userArticle = this.article(user);
    if (userArticle) {
      const edit = button("Edit", () => this.actions.edit(user), "Edit");
      edit.classList.add("last-turn");
      userArticle.querySelector(".actions").append(edit);
    }
    const last = this.messages.length - 1;
    const reply = this.article(last);
    if (reply && last > user) {
      const again = button("Regenerate", () => this.actions.regenerate(), "Regenerate");
      again.classList.add("last-turn");
      reply.querySelector(".actions").append(again);
    }
  }

  // a message not stored yet (the one being sent, the reply streaming)
  pending(message) {
    const article = this.articleFor(message, null);
    article.classList.add("pending");
    this.list.append(article);
    this.toBottom();
    return article;
  }

  dropPending() {
    for (const node of this.list.querySelectorAll("article.pending")) node.remove();
  }

  // drop the messages from ``index`` on (the turn a regenerate or edit replaces)
  truncate(index) {
    this.messages = this.messages.slice(0, index);
    for (const shown of this.expanded) if (shown >= index) this.expanded.delete(shown);
    for (const node of [...this.list.querySelectorAll("article[data-index]")]) {
      if (Number(node.dataset.index) >= index) this.takeOut(node);
    }
    this.end = Math.min(this.end, index);
    this.first = Math.min(this.first, this.end);
    this.refreshEnds();
  }

  // the turn's stored messages in place of the pending ones
  settle(position, messages) {
    this.dropPending();
    this.truncate(position);
    this.messages = this.messages.concat(messages);
    if (this.end < position) { // the reader went back meanwhile: they come as scrolled to
      this.refreshEnds();
      return;
    }
    this.list.append(...this.range(position, this.messages.length, [position, this.messages.length]));
    this.end = this.messages.length;
    this.drop(this.first, this.end - WINDOW);
    this.refreshEnds();
    this.toBottom();
  }
}

// A reply as it streams: re-rendered at most once a frame.
export class Streaming {
  constructor(transcript, article) {
    this.transcript = transcript;
    this.article = article;
    this.text = "";
    this.calls = [];
    this.scheduled = false;
  }

  call(name, args) {
    this.calls.push({name, arguments: args});
    this.add("");
  }

  add(text) {
    this.text += text;
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => {
      this.scheduled = false;
      const follow = this.transcript.nearBottom();
      const shown = {role: "assistant", content: this.text, tool_calls: this.calls};
      fillBody(this.article.querySelector(".body"), shown);
      if (follow) this.transcript.toBottom();
    });
  }
}
