// Syntax highlighting for code blocks, small and safe: one regular expression
// per language family finds comments, strings, numbers and words, and the code
// comes back as text nodes and <span class="hl-…"> elements (text only, never
// HTML). Linear in the code's length: every pattern either matches where it
// starts or fails at once, an unclosed string or comment running to its line's
// or the code's end.

const C_COMMENTS = String.raw`\/\/.*|\/\*[\s\S]*?(?:\*\/|$)`;
const HASH_COMMENT = String.raw`#.*`;
const QUOTED = String.raw`"(?:\\.|[^"\\\n])*"?|'(?:\\.|[^'\\\n])*'?`;
const BACKTICK = String.raw`\x60(?:\\[\s\S]|[^\x60\\])*\x60?`;
const TRIPLE = String.raw`"""[\s\S]*?(?:"""|$)|'''[\s\S]*?(?:'''|$)`;
const NUMBER = String.raw`\b(?:0[xX][\da-fA-F_]+|0[bB][01_]+|\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)` +
  String.raw`[a-zA-Z]*\b`; // and a suffix: 10px, 1u32, 2.5f
const WORD = String.raw`[A-Za-z_$][\w$]*`;
const LINE_START = String.raw`(?<![^\n])`; // no "m" flag: "$" is the code's end

const words = (text) => new Set(text.trim().split(/\s+/));

// each family: its comment and string patterns, an optional "meta" pattern
// (decorators, directives, variables), keywords, literals, whether a
// capitalised word is a type, and what follows a key (a word or string)
const COLON = /^\s*:(?!:)/;
const FAMILIES = {
  js: {
    comment: C_COMMENTS, string: `${QUOTED}|${BACKTICK}`, meta: String.raw`@[\w.]+`,
    keywords: words(`
      as async await break case catch class const continue debugger declare default delete do else
      enum export extends finally for from function get if implements import in instanceof
      interface keyof let new of private protected public readonly return set static switch throw
      try type typeof var void while with yield
    `),
    literals: words("true false null undefined NaN Infinity this super"),
    types: true,
  },
  python: {
    comment: HASH_COMMENT, string: `${TRIPLE}|[rRbBfFuU]{0,2}(?:${QUOTED})`, meta: String.raw`@[\w.]+`,
    keywords: words(`
      and as assert async await break case class continue def del elif else except finally for
      from global if import in is lambda match nonlocal not or pass raise return try while with
      yield
    `),
    literals: words("True False None self cls"),
    types: true,
  },
  c: {
    comment: C_COMMENTS, string: QUOTED, meta: String.raw`${LINE_START}[ \t]*#[ \t]*\w+|@\w+`,
    keywords: words(`
      abstract auto bool boolean break byte case catch char class const constexpr continue default
      defer delete do double else enum extends extern final finally float fn for func go goto if
      impl implements import in inline int interface let long loop match mod mut namespace native
      new package private protected pub public range return select short signed sizeof static
      struct super switch synchronized template this throw throws trait try type typedef typename
      union unsafe unsigned use using var virtual void volatile where while chan map
    `),
    literals: words("true false null nullptr nil NULL None Some Ok Err self Self iota"),
    types: true,
  },
  ruby: {
    comment: HASH_COMMENT, string: QUOTED, meta: String.raw`[@$:][A-Za-z_]\w*`,
    keywords: words(`
      alias and begin break case class def do else elsif end ensure for if in module next not or
      redo rescue retry return super then undef unless until when while yield require
    `),
    literals: words("true false nil self"),
    types: true,
  },
  php: {
    comment: `${C_COMMENTS}|${HASH_COMMENT}`, string: QUOTED, meta: String.raw`\$\w+`,
    keywords: words(`
      abstract and as break case catch class const continue declare default do echo else elseif
      extends final finally fn for foreach function global if implements include interface match
      namespace new or private protected public require return static switch throw trait try use
      var while yield
    `),
    literals: words("true false null TRUE FALSE NULL"),
    types: true,
  },
  bash: {
    comment: String.raw`(?<!\S)#.*`, string: QUOTED, meta: String.raw`\$\{[^}\n]*\}?|\$[\w@#?*!$-]`,
    keywords: words(`
      if then else elif fi for while until do done case esac in function return select export
      local readonly declare unset source alias
    `),
    literals: words("true false"),
  },
  sql: {
    comment: String.raw`--.*|\/\*[\s\S]*?(?:\*\/|$)`, string: QUOTED, ignoreCase: true,
    keywords: words(`
      add all alter and as asc begin between by case check column commit constraint create cross
      default delete desc distinct drop else end exists foreign from full group having if in index
      inner insert into is join key left like limit not offset on or order outer primary
      references returning right rollback select set table then union unique update values view
      when where with
    `),
    literals: words("true false null"),
  },
  json: {
    comment: C_COMMENTS, string: QUOTED, key: COLON,
    keywords: new Set(), literals: words("true false null"),
  },
  yaml: {
    comment: String.raw`(?<!\S)#.*`, string: QUOTED, key: COLON,
    meta: String.raw`${LINE_START}---(?=\n|$)|[&*][\w-]+|![\w!]+`,
    keywords: new Set(), literals: words("true false null yes no on off ~"),
  },
  toml: {
    comment: String.raw`[#;].*`, string: `${TRIPLE}|${QUOTED}`, key: /^\s*=/,
    meta: String.raw`${LINE_START}[ \t]*\[[^\]\n]*\]+`,
    keywords: new Set(), literals: words("true false"),
  },
  css: {
    comment: String.raw`\/\*[\s\S]*?(?:\*\/|$)`, string: QUOTED,
    meta: String.raw`@[\w-]+|#[\da-fA-F]{3,8}\b|!important`,
    keywords: new Set(), literals: new Set(),
  },
};

const ALIASES = {
  js: "js javascript mjs cjs jsx ts typescript tsx node",
  python: "python py python3 py3 pyi ipython",
  c: "c h cpp c++ cc cxx hpp java kotlin kt scala cs csharp c# go golang rust rs swift dart groovy zig",
  ruby: "ruby rb",
  php: "php",
  bash: "bash sh shell zsh fish ksh console shell-session shellsession dockerfile docker makefile make",
  sql: "sql psql postgresql postgres mysql sqlite plsql",
  json: "json jsonc json5 jsonl ndjson",
  yaml: "yaml yml",
  toml: "toml ini cfg conf properties editorconfig",
  css: "css scss sass less",
  markup: "html htm xml svg xhtml vue svelte xsl plist",
  diff: "diff patch",
};

const FAMILY_OF = {};
for (const [family, names] of Object.entries(ALIASES)) {
  for (const name of names.split(" ")) FAMILY_OF[name] = family;
}

const compiled = new Map();

function patternOf(family) {
  let pattern = compiled.get(family);
  if (!pattern) {
    const spec = FAMILIES[family];
    const groups = [spec.comment, spec.string, NUMBER, WORD, spec.meta || "(?!)"];
    pattern = new RegExp(groups.map((g) => `(${g})`).join("|"), "g");
    compiled.set(family, pattern);
  }
  return pattern;
}

const KINDS = ["c", "s", "n", "w", "m"];

// [[kind, text], ...] with kind "" for plain text
function tokenize(code, family) {
  const spec = FAMILIES[family];
  const pattern = patternOf(family);
  const out = [];
  let last = 0;
  pattern.lastIndex = 0;
  let match;
  while ((match = pattern.exec(code))) {
    const text = match[0];
    if (!text) { pattern.lastIndex++; continue; }
    if (match.index > last) out.push(["", code.slice(last, match.index)]);
    let kind = KINDS[match.slice(1).findIndex((group) => group !== undefined)];
    const end = match.index + text.length;
    if (kind === "w") {
      const word = spec.ignoreCase ? text.toLowerCase() : text;
      if (spec.keywords.has(word)) kind = "k";
      else if (spec.literals.has(word)) kind = "l";
      else if (spec.key?.test(code.slice(end, end + 40))) kind = "p";
      else if (code[end] === "(") kind = "f";
      else if (spec.types && /^[A-Z][a-z]/.test(text)) kind = "t";
      else kind = "";
    } else if (kind === "s" && spec.key?.test(code.slice(end, end + 40))) {
      kind = "p";
    }
    out.push([kind, text]);
    last = end;
  }
  if (last < code.length) out.push(["", code.slice(last)]);
  return out;
}

// HTML and XML: comments, then tags with their attribute names and values
const MARKUP = /<!--[\s\S]*?(?:-->|$)|<!\[CDATA\[[\s\S]*?(?:\]\]>|$)|<[!?/]?[A-Za-z][^<>]*>?/g;
const TAG_PARTS = /^(<[!?/]?)([^\s/>]+)|([^\s="'/>]+)(?=\s*=)|"[^"]*"?|'[^']*'?/g;

function tokenizeMarkup(code) {
  const out = [];
  let last = 0;
  for (const match of code.matchAll(MARKUP)) {
    if (match.index > last) out.push(["", code.slice(last, match.index)]);
    const tag = match[0];
    if (tag.startsWith("<!--") || tag.startsWith("<![")) {
      out.push(["c", tag]);
    } else {
      let at = 0;
      for (const part of tag.matchAll(TAG_PARTS)) {
        if (part.index > at) out.push(["", tag.slice(at, part.index)]);
        if (part[2] !== undefined) out.push(["", part[1]], ["t", part[2]]);
        else out.push([part[3] !== undefined ? "a" : "s", part[0]]);
        at = part.index + part[0].length;
      }
      if (at < tag.length) out.push(["", tag.slice(at)]);
    }
    last = match.index + tag.length;
  }
  if (last < code.length) out.push(["", code.slice(last)]);
  return out;
}

function tokenizeDiff(code) {
  return code.split(/(?<=\n)/).map((line) => {
    const first = line[0];
    const kind = first === "+" ? "i" : first === "-" ? "d" : line.startsWith("@@") ? "m" : "";
    return [kind, line];
  });
}

// ``code`` as a fragment of text and spans; code in a language not known
// here is one text node
export function highlight(code, language) {
  const family = FAMILY_OF[String(language || "").toLowerCase()];
  const fragment = document.createDocumentFragment();
  if (!family) {
    fragment.append(code);
    return fragment;
  }
  const tokens = family === "markup" ? tokenizeMarkup(code)
    : family === "diff" ? tokenizeDiff(code) : tokenize(code, family);
  for (const [kind, text] of tokens) {
    if (!kind) {
      fragment.append(text);
      continue;
    }
    const span = document.createElement("span");
    span.className = "hl-" + kind;
    span.textContent = text;
    fragment.append(span);
  }
  return fragment;
}
