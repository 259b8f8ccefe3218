// The messages of the open session, rendered incrementally: a window of them
// is in the page, and more are added as the reader scrolls towards either end
// (a session of thousands of messages opens and scrolls as fast as a short one;
// the browser skips laying out those out of view: content-visibility in app.css).

import {copyText, renderMarkdown} from "./markdown.js";

const CHUNK = 40;
const CONTEXT = 5; // messages shown before a search hit
const MARGIN = 600; // px from an end of the rendered messages that renders more

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

export function usageLine(message) {
  const parts = [];
  if (message.model) parts.push(message.model);
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

export function fillBody(body, message) {
  body.replaceChildren();
  if (message.role === "tool") {
    const details = el("details");
    details.append(el("summary", null, `Result of ${message.name || "a tool"}`));
    details.append(el("pre", "tool-output", String(message.content ?? "")));
    body.append(details);
    return;
  }
  if (message.content) body.append(renderMarkdown(String(message.content)));
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
    this.list.replaceChildren();
    if (at === null || at >= messages.length) {
      this.end = messages.length;
      this.first = Math.max(0, this.end - CHUNK);
    } else {
      this.first = Math.max(0, at - CONTEXT);
      this.end = Math.min(messages.length, at + CHUNK);
    }
    this.list.append(...this.range(this.first, this.end));
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

  range(from, to) {
    const nodes = [];
    for (let i = from; i < to; i++) nodes.push(this.articleFor(this.messages[i], i));
    return nodes;
  }

  refreshEnds() {
    this.earlier.hidden = this.first === 0;
    this.later.hidden = this.end >= this.messages.length;
    this.markLastTurn();
  }

  renderEarlier() {
    if (this.first === 0) return;
    const from = Math.max(0, this.first - CHUNK);
    const before = this.scroller.scrollHeight;
    this.list.prepend(...this.range(from, this.first));
    this.first = from;
    this.scroller.scrollTop += this.scroller.scrollHeight - before;
    this.refreshEnds();
    this.schedule();
  }

  renderLater() {
    if (this.end >= this.messages.length) return;
    const to = Math.min(this.messages.length, this.end + CHUNK);
    this.list.append(...this.range(this.end, to));
    this.end = to;
    this.refreshEnds();
    this.schedule();
  }

  // every message to the end in the page (before a turn adds to it)
  renderToEnd() {
    if (this.end < this.messages.length) {
      this.list.append(...this.range(this.end, this.messages.length));
      this.end = this.messages.length;
      this.refreshEnds();
    }
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

  articleFor(message, index) {
    const role = message.role || "assistant";
    const article = el("article", "message " + role);
    article.dataset.role = role;
    if (index !== null) article.dataset.index = index;
    article.setAttribute("aria-label", `${role} message${index !== null ? " " + (index + 1) : ""}`);
    const body = el("div", "body");
    fillBody(body, message);
    article.append(body);
    const footer = el("div", "footer");
    const usage = role === "assistant" ? usageLine(message) : "";
    footer.append(el("span", "usage", usage));
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
    for (const node of [...this.list.querySelectorAll("article[data-index]")]) {
      if (Number(node.dataset.index) >= index) node.remove();
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
    this.list.append(...this.range(position, this.messages.length));
    this.end = this.messages.length;
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
