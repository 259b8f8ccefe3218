"""Writing a streamed reply to stdout without losing the turn to a failed write."""

from __future__ import annotations

import sys

from foliko_cli.cli.stdout import StdoutWriteError, output_failure

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

    def on_event(self, event: dict) -> None:
        if event["type"] == "delta":
            self.write(event["text"])

    def end_line(self) -> None:
        """End a partly written line, so that what follows starts on its own."""
        if not self.at_line_start:
            self.write("\n")

    def check(self) -> None:
        if self.failure is not None:
            raise output_failure(self.failure, after=SAVED_NOT_WRITTEN) from None
