"""Markdown code fences that the text inside them cannot close."""

from __future__ import annotations


def fence_for(text: str) -> str:
    """Backticks, at least three and one more than the longest run inside ``text``."""
    longest, run = 0, 0
    for char in text:
        run = run + 1 if char == "`" else 0
        longest = max(longest, run)
    return "`" * max(3, longest + 1)
