"""Markdown code fences that the text inside them cannot close."""

from __future__ import annotations


def fence_for(text: str) -> str:
    """Backticks, at least three and one more than the longest run inside ``text``."""
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)


CODE_BLOCK = r"^(?P<fence>`{3,})[^`\n]*\n(?P<code>.*?)^(?P=fence)[ ]*(?=\n|\Z)"


def code_block(text: str, *, last: bool = False) -> str | None:
    """The text of the first (``last``: the last) fenced code block in ``text``, or
    None when it has none: llm's rule for ``-x`` and ``--xl``. A fence is three or
    more backticks at the start of a line, then an info string (``python``); the
    block ends at a line of as many backticks (trailing spaces allowed). The text
    comes without the line break before the closing fence."""
    import re

    blocks = list(re.finditer(CODE_BLOCK, text, re.MULTILINE | re.DOTALL))
    if not blocks:
        return None
    return blocks[-1 if last else 0].group("code").removesuffix("\n")


def extracted(text: str, which: str | None) -> str:
    """``text``, or (``which``: ``"first"`` or ``"last"``) that code block of it, as
    llm's ``-x``/``--xl`` print it: the whole text when it has none."""
    if which is None:
        return text
    block = code_block(text, last=which == "last")
    return text if block is None else block
