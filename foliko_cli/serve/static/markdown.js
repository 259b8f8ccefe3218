// A small, safe Markdown renderer: it builds DOM nodes and sets only their
// text, never HTML, so HTML in a message is shown as the text it is and never
// runs. Blocks: paragraphs, ATX headings, fenced and indented code (with a
// copy button), block quotes, nested lists (task items too), GFM tables,
// rules. Inline: code, strong, emphasis, strikethrough, links and autolinks
// (http, https and mailto only; images are shown as links: the page loads
// nothing from elsewhere), hard breaks, backslash escapes. An unclosed fence
// (a reply still streaming) is a code block to the end. Code blocks are
// highlighted (syntax.js). Linear in the text's length, give or take an
// emphasis that never closes; ``sections`` cuts a long text into pieces that
// render alone as they do together.

import {highlight} from "./syntax.js";

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])([ \t]+(.*))?$/;
const DELIMITER_ROW = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const CLOSING_FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*$/;
const SAFE_URL = /^(https?:\/\/|mailto:)/i;
const AUTOLINK = /<((?:https?:\/\/|mailto:)[^\s<>]+)>/iy;
const BARE_URL = /https?:\/\/[^\s<>]+/iy;
const LETTER_END = /[\p{L}\p{N}]$/u;
const PUNCTUATION = /[!-/:-@[-`{-~]/;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const blank = (line) => /^\s*$/.test(line);
const indentOf = (line) => line.match(/^ */)[0].length;
const expandTabs = (line) => line.replace(/^\t+/, (tabs) => "    ".repeat(tabs.length));

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) ||
    ITEM.test(line);
}

export function codeBlock(code, language) {
  const box = el("div", "code");
  const head = el("div", "code-head");
  head.append(el("span", "code-lang", language || "text"));
  const copy = el("button", "copy", "Copy");
  copy.type = "button";
  copy.setAttribute("aria-label", "Copy code");
  copy.addEventListener("click", () => copyText(code, copy));
  head.append(copy);
  const pre = el("pre");
  const inner = el("code");
  inner.append(highlight(code, language));
  if (language) inner.dataset.language = language;
  pre.append(inner);
  pre.tabIndex = 0; // scrollable with the keyboard
  box.append(head, pre);
  return box;
}

export async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const area = el("textarea");
    area.value = text;
    document.body.append(area);
    area.select();
    document.execCommand("copy");
    area.remove();
  }
  if (button) {
    const label = button.textContent;
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = label; }, 1500);
  }
}

function splitRow(line) {
  let text = line.trim();
  if (text.startsWith("|")) text = text.slice(1);
  if (text.endsWith("|") && !text.endsWith("\\|")) text = text.slice(0, -1);
  const cells = [];
  let cell = "";
  let inCode = false;
  for (let i = 0; i < text.length; i++) {
    const char = text[i];
    if (char === "\\" && text[i + 1] === "|") { cell += "|"; i++; continue; }
    if (char === "`") inCode = !inCode;
    if (char === "|" && !inCode) { cells.push(cell.trim()); cell = ""; continue; }
    cell += char;
  }
  cells.push(cell.trim());
  return cells;
}

function table(lines, start) {
  const header = splitRow(lines[start]);
  const aligns = splitRow(lines[start + 1]).map((cell) => {
    const left = cell.startsWith(":"), right = cell.endsWith(":");
    return left && right ? "center" : right ? "right" : left ? "left" : "";
  });
  const wrap = el("div", "table-wrap");
  wrap.tabIndex = 0;
  const node = el("table");
  const head = el("thead");
  const headRow = el("tr");
  header.forEach((cell, i) => {
    const th = el("th");
    if (aligns[i]) th.style.textAlign = aligns[i];
    th.append(inline(cell));
    headRow.append(th);
  });
  head.append(headRow);
  node.append(head);
  const body = el("tbody");
  let i = start + 2;
  for (; i < lines.length && !blank(lines[i]) && lines[i].includes("|"); i++) {
    const row = el("tr");
    const cells = splitRow(lines[i]);
    header.forEach((_, column) => {
      const td = el("td");
      if (aligns[column]) td.style.textAlign = aligns[column];
      td.append(inline(cells[column] || ""));
      row.append(td);
    });
    body.append(row);
  }
  if (body.children.length) node.append(body);
  wrap.append(node);
  return [wrap, i];
}

function list(lines, start) {
  const first = lines[start].match(ITEM);
  const ordered = /\d/.test(first[2]);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) node.start = parseInt(first[2], 10);
  const baseIndent = first[1].length;
  const markerKind = ordered ? first[2].slice(-1) : first[2];
  let i = start;
  let loose = false;
  const items = [];
  while (i < lines.length) {
    const match = lines[i].match(ITEM);
    if (!match || match[1].length !== baseIndent) break;
    const kind = /\d/.test(match[2]) ? match[2].slice(-1) : match[2];
    if (kind !== markerKind) break;
    const contentIndent = baseIndent + match[2].length + Math.min((match[3] || " ").length - (match[4] || "").length, 4);
    const body = [match[4] || ""];
    i++;
    let sawBlank = false;
    while (i < lines.length) {
      const line = lines[i];
      if (blank(line)) { body.push(""); sawBlank = true; i++; continue; }
      const indent = indentOf(line);
      if (indent >= contentIndent) { body.push(line.slice(contentIndent)); i++; sawBlank = false; continue; }
      if (sawBlank || startsBlock(line)) break;
      body.push(line.trim()); // a lazy continuation of the paragraph
      i++;
    }
    let trailingBlank = false;
    while (body.length > 1 && blank(body[body.length - 1])) { body.pop(); trailingBlank = true; }
    if (body.slice(1).some(blank) || (trailingBlank && i < lines.length && ITEM.test(lines[i]))) loose = true;
    items.push(body);
  }
  for (const body of items) {
    const li = el("li");
    const task = body[0].match(/^\[([ xX])\][ \t]+(.*)$/);
    if (task) {
      const box = el("input");
      box.type = "checkbox";
      box.disabled = true;
      box.checked = task[1] !== " ";
      li.className = "task";
      li.append(box, " ");
      body[0] = task[2];
    }
    const blocks = parseBlocks(body);
    if (!loose && blocks.length && blocks[0].tagName === "P") {
      li.append(...blocks[0].childNodes);
      li.append(...blocks.slice(1));
    } else {
      li.append(...blocks);
    }
    node.append(li);
  }
  return [node, i];
}

function parseBlocks(rawLines) {
  const lines = rawLines.map(expandTabs);
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (blank(line)) { i++; continue; }
    let match;
    if ((match = line.match(FENCE))) {
      const fence = match[1];
      const indent = indentOf(line);
      const code = [];
      i++;
      while (i < lines.length) {
        const closing = lines[i].match(CLOSING_FENCE);
        if (closing && closing[1][0] === fence[0] && closing[1].length >= fence.length) { i++; break; }
        code.push(lines[i].slice(Math.min(indent, indentOf(lines[i]))));
        i++;
      }
      blocks.push(codeBlock(code.join("\n"), match[2]));
      continue;
    }
    if (indentOf(line) >= 4) {
      const code = [];
      while (i < lines.length && (indentOf(lines[i]) >= 4 || blank(lines[i]))) code.push(lines[i++].slice(4));
      while (code.length && blank(code[code.length - 1])) code.pop();
      blocks.push(codeBlock(code.join("\n"), ""));
      continue;
    }
    if ((match = line.match(HEADING))) {
      const heading = el("h" + Math.min(match[1].length + 2, 6), "md-h" + match[1].length);
      heading.append(inline(match[2] || ""));
      blocks.push(heading);
      i++;
      continue;
    }
    if (RULE.test(line)) { blocks.push(el("hr")); i++; continue; }
    if (QUOTE.test(line)) {
      const quoted = [];
      while (i < lines.length && (match = lines[i].match(QUOTE))) { quoted.push(match[1]); i++; }
      const quote = el("blockquote");
      quote.append(...parseBlocks(quoted));
      blocks.push(quote);
      continue;
    }
    if (ITEM.test(line)) {
      const [node, next] = list(lines, i);
      blocks.push(node);
      i = next;
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && DELIMITER_ROW.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      const [node, next] = table(lines, i);
      blocks.push(node);
      i = next;
      continue;
    }
    const text = [line];
    i++;
    while (i < lines.length && !blank(lines[i]) && !startsBlock(lines[i]) &&
      !(lines[i].includes("|") && i + 1 < lines.length && DELIMITER_ROW.test(lines[i + 1]))) {
      text.push(lines[i]);
      i++;
    }
    const paragraph = el("p");
    paragraph.append(inline(text.map((l) => l.replace(/^ +/, "")).join("\n")));
    blocks.push(paragraph);
  }
  return blocks;
}

function safeLink(href, children) {
  const url = href.trim();
  if (!SAFE_URL.test(url)) {
    const span = el("span");
    span.append(...children);
    return span;
  }
  const link = el("a");
  link.href = url;
  link.rel = "noopener noreferrer nofollow";
  link.target = "_blank";
  link.append(...children);
  return link;
}

// the closing ``]`` of the link text opened at ``start``, nesting respected
function closingBracket(text, start) {
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    if (text[i] === "\\") { i++; continue; }
    if (text[i] === "[") depth++;
    else if (text[i] === "]" && --depth === 0) return i;
  }
  return -1;
}

function linkTarget(text, start) {
  if (text[start] !== "(") return null;
  let depth = 0;
  for (let i = start; i < text.length; i++) {
    if (text[i] === "\\") { i++; continue; }
    if (text[i] === "(") depth++;
    else if (text[i] === ")" && --depth === 0) {
      const inside = text.slice(start + 1, i).trim();
      const href = inside.match(/^<([^>]*)>|^(\S*)/);
      return {href: href[1] !== undefined ? href[1] : href[2], end: i + 1};
    }
  }
  return null;
}

const DELIMS = ["**", "__", "~~", "*", "_"];
const TAGS = {"**": "strong", "__": "strong", "~~": "del", "*": "em", "_": "em"};

// the run of ``char`` starting at ``i``
function runAt(text, i, char) {
  let end = i;
  while (text[end] === char) end++;
  return text.slice(i, end);
}

// the last character of ``text`` is a letter or a digit (a look at its end only)
const wordBefore = (text) => LETTER_END.test(text.slice(-2));

function match(pattern, text, at) {
  pattern.lastIndex = at;
  return pattern.exec(text);
}

function closingDelimiter(text, delim, from, unclosed) {
  if (unclosed[delim] !== undefined && from >= unclosed[delim]) return -1; // searched already
  const found = findClosing(text, delim, from);
  if (found < 0) unclosed[delim] = from;
  return found;
}

function findClosing(text, delim, from) {
  for (let i = from; i < text.length; i++) {
    if (text[i] === "\\") { i++; continue; }
    if (text[i] === "`") {
      const run = runAt(text, i, "`");
      const close = text.indexOf(run, i + run.length);
      if (close > 0) { i = close + run.length - 1; continue; }
    }
    if (text.startsWith(delim, i) && i > from && !/\s/.test(text[i - 1])) {
      if (delim.length === 1 && text[i + 1] === delim) { i++; continue; }
      if (delim[0] === "_" && /[\p{L}\p{N}]/u.test(text[i + delim.length] || "")) continue;
      return i;
    }
  }
  return -1;
}

export function inline(text) {
  const out = document.createDocumentFragment();
  const unclosed = {}; // delimiter -> where a search for its closing one failed
  let buffer = "";
  const flush = () => { if (buffer) { out.append(buffer); buffer = ""; } };
  for (let i = 0; i < text.length;) {
    const char = text[i];
    if (char === "\\" && PUNCTUATION.test(text[i + 1] || "")) { buffer += text[i + 1]; i += 2; continue; }
    if (char === "\\" && text[i + 1] === "\n") { flush(); out.append(el("br")); i += 2; continue; }
    if (char === "\n") {
      if (buffer.endsWith("  ")) { buffer = buffer.trimEnd(); flush(); out.append(el("br")); }
      else buffer += "\n";
      i++;
      continue;
    }
    if (char === "`") {
      const run = runAt(text, i, "`");
      const key = "`" + run.length;
      const close = unclosed[key] <= i ? -1 : text.indexOf(run, i + run.length);
      if (close < 0) unclosed[key] = i;
      if (close > 0 && text[close + run.length] !== "`") {
        let code = text.slice(i + run.length, close).replace(/\n/g, " ");
        if (/^ .* $/.test(code) && code.trim()) code = code.slice(1, -1);
        flush();
        out.append(el("code", null, code));
        i = close + run.length;
        continue;
      }
      buffer += run;
      i += run.length;
      continue;
    }
    if (char === "!" && text[i + 1] === "[") {
      const end = closingBracket(text, i + 1);
      const target = end > 0 ? linkTarget(text, end + 1) : null;
      if (target) {
        flush();
        const alt = text.slice(i + 2, end) || target.href;
        out.append(safeLink(target.href, ["image: ", alt]));
        i = target.end;
        continue;
      }
    }
    if (char === "[") {
      const end = closingBracket(text, i);
      const target = end > 0 ? linkTarget(text, end + 1) : null;
      if (target) {
        flush();
        out.append(safeLink(target.href, [inline(text.slice(i + 1, end))]));
        i = target.end;
        continue;
      }
    }
    if (char === "<") {
      const auto = match(AUTOLINK, text, i);
      if (auto) { flush(); out.append(safeLink(auto[1], [auto[1]])); i += auto[0].length; continue; }
    }
    if ((char === "h" || char === "H") && !wordBefore(buffer)) {
      const bare = match(BARE_URL, text, i);
      if (bare) {
        let url = bare[0];
        while (/[.,:;!?'")\]]$/.test(url) && !(url.endsWith(")") && url.split("(").length > url.split(")").length - 1)) url = url.slice(0, -1);
        flush();
        out.append(safeLink(url, [url]));
        i += url.length;
        continue;
      }
    }
    const delim = DELIMS.find((d) => text.startsWith(d, i));
    if (delim && text[i + delim.length] && !/\s/.test(text[i + delim.length]) &&
        !(delim[0] === "_" && wordBefore(buffer))) {
      const close = closingDelimiter(text, delim, i + delim.length, unclosed);
      if (close > 0) {
        flush();
        const node = el(TAGS[delim]);
        node.append(inline(text.slice(i + delim.length, close)));
        out.append(node);
        i = close + delim.length;
        continue;
      }
    }
    buffer += char;
    i++;
  }
  flush();
  return out;
}

// ``text`` rendered into a fragment of block nodes
export function renderMarkdown(text) {
  const fragment = document.createDocumentFragment();
  fragment.append(...parseBlocks(String(text).replace(/\r\n?/g, "\n").split("\n")));
  return fragment;
}

// Where ``text`` can be cut into pieces of about ``size`` characters, each of
// which renders alone as it does in the whole: before a line at the margin
// that follows a blank line or starts a list item, outside code blocks and
// tables. With no such place within four times ``size``, a piece ends at the
// end of a line, and a code block or a table goes on in the next piece after
// its ``reopen`` (the fence, the header rows); a longer line is cut at a
// space. [[start, end, reopen], ...] covering the text, at most ``count`` of
// them: linear, and it reads no further than the last piece it returns.
export function sections(text, size, count = Infinity) {
  const out = [];
  const most = 4 * size;
  const endOf = (pos) => (text.indexOf("\n", pos) + 1 || text.length + 1) - 1; // of its line
  const lineAt = (pos) => text.slice(pos, Math.min(endOf(pos), pos + 400)); // enough to know it
  let start = 0;
  let reopen = "";
  let fence = null; // the code block we are in: {line, marker} of its opening
  let table = null; // the table we are in: its header rows
  let blankBefore = false;
  const cut = (at) => {
    out.push([start, at, reopen]);
    start = at;
    reopen = fence ? fence.line + "\n" : table || "";
  };
  for (let pos = 0; pos < text.length && out.length < count;) {
    const end = endOf(pos);
    const line = lineAt(pos);
    if (table && (blank(line) || !line.includes("|"))) table = null;
    const starts = !fence && !table && !blank(line) && !/^[ \t]/.test(line) &&
      (blankBefore || ITEM.test(line));
    if (pos > start && ((pos - start >= size && starts) || end - start > most)) cut(pos);
    while (end - start > most && out.length < count) { // a line too long for one piece
      const space = text.lastIndexOf(" ", start + most);
      cut(space > Math.max(start, pos) ? space + 1 : start + most);
    }
    const marker = (fence ? line.match(CLOSING_FENCE) : line.match(FENCE))?.[1];
    if (!fence && marker) {
      fence = {line, marker};
    } else if (marker && marker[0] === fence.marker[0] && marker.length >= fence.marker.length) {
      fence = null;
    } else if (!fence && !table && line.includes("|")) {
      const next = lineAt(end + 1);
      if (DELIMITER_ROW.test(next) && next.includes("-")) table = `${line}\n${next}\n`;
    }
    blankBefore = blank(line);
    pos = end + 1;
  }
  if (out.length < count && (start < text.length || !out.length)) out.push([start, text.length, reopen]);
  return out;
}
