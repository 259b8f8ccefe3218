"""Writing a streamed reply to stdout without losing the turn to a failed write."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from foliko_cli.cli.stdout import StdoutWriteError, output_failure

if TYPE_CHECKING:
    from foliko_cli.service.values import TurnResult

SAVED_NOT_WRITTEN = "the turn was saved but the reply could not be written"


class ReplyWriter:
    """Writes streamed deltas; remembers a failed write instead of aborting the turn.

    ``at_line_start`` tells whether a message printed now needs a newline first.
    """

    def __init__(self) -> None:
        self.failure: OSError | None = None
        self.at_line_start = True

    def write(self, text: str) -> None:
        if self.failure is not None or not text:
            return
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except StdoutWriteError as exc:
            self.failure = exc
            return
        self.at_line_start = text.endswith("\n")

    def on_event(self, event: dict[str, Any]) -> None:
        if event["type"] == "delta":
            self.write(event["text"])
        elif event["type"] == "tool_call":
            self.end_line()  # a question about the call (approval) starts on its own line

    def end_line(self) -> None:
        """End a partly written line, so that what follows starts on its own."""
        if not self.at_line_start:
            self.write("\n")

    def check(self) -> None:
        if self.failure is not None:
            raise output_failure(self.failure, after=SAVED_NOT_WRITTEN) from None


CUT_BY_LIMIT = ("length", "max_tokens")
FILTERED = ("content_filter", "refusal")


def turn_notes(result: TurnResult, *, terminal: bool) -> list[str]:
    """What the turn did that the reply does not show, one line each: a reply cut
    at its token limit or stopped by a content filter, a turn stopped at the step
    limit and (on a ``terminal``) a history compressed to fit the window."""
    notes = []
    reason = result.finish_reason
    if reason in CUT_BY_LIMIT:
        limit = result.max_tokens
        said = f"its limit of {limit:,} tokens" if limit else "its token limit"
        more = f"-o max_tokens={limit * 2}" if limit else "-o max_tokens=N"
        notes.append(
            f"the reply was cut at {said} (max_tokens, finish reason {reason}); raise it "
            f"with {more}, or with max_tokens in the model's [models.NAME] alias"
        )
    elif reason in FILTERED:
        notes.append(
            f"the provider's content filter stopped the reply (finish reason {reason}); "
            "what came before it is kept: rephrase the message or use another model"
        )
    elif reason == "max_steps":
        notes.append(
            f"the turn stopped after {result.step_count} model calls with the model still "
            "calling tools (the step limit); raise max_steps (FOLIKO_MAX_STEPS) for more"
        )
    compressed = result.compressed
    if compressed and terminal:
        done = "summarised" if compressed.get("method") == "summary" else "left out"
        notes.append(
            f"the history was compressed to fit the {compressed['window']:,}-token window: "
            f"its first {compressed['covered']:,} messages are {done} for the model "
            "(the stored history is whole)"
        )
    return notes
