"""Sessions written out for foliko itself and for other tools: one module per
format (mirroring importers/), each with ``lines(records)``, the text it writes
line by line, over an iterable of SessionRecords. Every format is
deterministic: the same sessions give the same bytes.

Importing this package is cheap (the CLI names the formats at start-up); a
format's module is imported when it is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from foliko_cli.errors import Hint, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from foliko_cli.messages.record import SessionRecord

# name -> (module, function); ``json`` is foliko's own format by its older name.
_WRITERS = {
    "foliko": ("foliko", "lines"),
    "json": ("foliko", "lines"),
    "ndjson": ("foliko", "ndjson_lines"),
    "markdown": ("markdown", "lines"),
    "openai": ("openai", "lines"),
    "chatgpt": ("chatgpt", "lines"),
}
FORMATS = tuple(_WRITERS)


def writer(name: str) -> Callable[[Iterable[SessionRecord]], Iterator[str]]:
    """The ``lines`` function of the format ``name``."""
    import importlib

    if name not in _WRITERS:
        raise UsageError(
            f"unknown export format {name!r}",
            fix=f"use one of {', '.join(FORMATS)}",
            hint=Hint.FORMAT,
        )
    module, function = _WRITERS[name]
    return cast(
        "Callable[[Iterable[SessionRecord]], Iterator[str]]",
        getattr(importlib.import_module(f"foliko_cli.formats.exporters.{module}"), function),
    )
