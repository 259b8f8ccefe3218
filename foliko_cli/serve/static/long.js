// A message too long to render at once: its first piece, then "Show all".
// Shown all, it is a column of pieces (markdown.js's ``sections``, found by a
// worker) each rendered as it comes near the screen and emptied again once far
// from it (keeping its height): a 10 MB message scrolls like a short one, and
// the main thread never parses more than a piece at a time.

import {renderMarkdown, sections} from "./markdown.js";

const PIECE = 16000; // characters of a piece, about
const LONG = 2 * PIECE; // longer than this, a message shows its first piece
const NEAR = "2000px 0px"; // how near the screen a piece is rendered

let worker = null;
let asked = 0;
const waiting = new Map(); // request id -> [text, resolve]

function piecesOf(text) {
  if (!worker) {
    worker = new Worker(new URL("./markdown-worker.js", import.meta.url), {type: "module"});
    worker.onmessage = ({data}) => {
      waiting.get(data.id)[1](data.pieces);
      waiting.delete(data.id);
    };
    worker.onerror = () => { // no worker after all: the pieces are found here
      for (const [text, resolve] of waiting.values()) resolve(sections(text, PIECE));
      waiting.clear();
    };
  }
  const id = ++asked;
  return new Promise((resolve) => {
    waiting.set(id, [text, resolve]);
    worker.postMessage({id, text, size: PIECE});
  });
}

function button(label, name, onClick) {
  const node = document.createElement("button");
  node.type = "button";
  node.className = "more";
  node.textContent = label;
  if (name) node.setAttribute("aria-label", `${label} of ${name}`);
  node.addEventListener("click", onClick);
  return node;
}

// a plain text's pieces: about PIECE characters each, cut after a line's end
function plainPieces(text, count = Infinity) {
  const out = [];
  for (let start = 0; start < text.length && out.length < count;) {
    let end = Math.min(text.length, start + PIECE);
    const line = end < text.length ? text.lastIndexOf("\n", end) : -1;
    if (line > start) end = line + 1;
    out.push([start, end, ""]);
    start = end;
  }
  return out;
}

// ``text`` into ``box``: as Markdown (``plain``: as the text it is, in a <pre>),
// whole when it is short, else its first piece and ``expand`` as "Show all";
// ``expanded``: all of it, rendered piece by piece within ``scroller``, and
// ``collapse`` as "Show less" (their accessible names say of what: ``name``)
export function renderText(box, text, view = {}) {
  const {plain = false, expanded = false, expand, collapse, scroller, name} = view;
  const render = plain ? (part) => Object.assign(document.createElement("pre"), {textContent: part})
    : renderMarkdown;
  if (text.length <= LONG) {
    box.append(render(text));
    return;
  }
  const [, end] = (plain ? plainPieces(text, 1) : sections(text, PIECE, 1))[0];
  const column = document.createElement("div");
  column.append(render(text.slice(0, end))); // the first piece
  if (!expanded) {
    const cut = document.createElement("p");
    cut.className = "cut";
    cut.append(`… ${(text.length - end).toLocaleString()} more characters `);
    if (expand) cut.append(button("Show all", name, expand));
    box.append(column, cut);
    return;
  }
  if (collapse) box.append(button("Show less", name, collapse));
  box.append(column);
  const pieces = plain ? Promise.resolve(plainPieces(text)) : piecesOf(text);
  pieces.then((found) => showPieces(column, text, found, scroller, render));
}

function showPieces(column, text, pieces, scroller, render) {
  const first = [...column.childNodes]; // rendered already
  const perChar = Math.max(column.offsetHeight / pieces[0][1], 0.05); // a piece's height until rendered
  const observer = new IntersectionObserver((entries) => {
    for (const {target, isIntersecting} of entries) {
      if (isIntersecting && !target.firstChild) {
        const [start, end, reopen] = target.piece;
        target.append(render(reopen + text.slice(start, end)));
        target.style.height = "";
      } else if (!isIntersecting && target.firstChild) {
        target.style.height = target.offsetHeight + "px";
        target.replaceChildren();
      }
    }
  }, {root: scroller, rootMargin: NEAR});
  const nodes = pieces.map((piece, index) => {
    const node = document.createElement("div");
    node.className = "piece";
    node.piece = piece;
    if (index === 0) node.append(...first);
    else node.style.height = Math.round((piece[1] - piece[0]) * perChar) + "px";
    observer.observe(node);
    return node;
  });
  column.replaceChildren(...nodes);
}
