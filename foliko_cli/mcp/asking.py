"""Questions for the user: approving a tool call, and answering a server's elicitation.

The core never prints and never reads a terminal. The application gives the
service an ``Asker``; the MCP manager puts each question to it, or, with no
asker (a library, ``foliko serve``) or an asker that cannot ask (a pipe),
answers by the server's config: a call that needs approval is refused, an
elicitation declined (or, with ``elicitation = "defaults"``, accepted with
the fields' defaults). The forms themselves are read by ``forms.py``.

This module is imported by every turn that has MCP servers: it holds only
small types.
"""

from typing import TYPE_CHECKING, Any, Literal, NamedTuple


class ToolCall(NamedTuple):
    """A call that needs the user's approval: ``tool`` as the server names it,
    ``name`` as the model called it."""

    server: str
    tool: str
    name: str
    arguments: dict[str, Any]


class Elicitation(NamedTuple):
    """A server's question (MCP 2025-11-25 client/elicitation): in form mode
    ``schema`` is the ``requestedSchema``; in URL mode ``url`` is the page."""

    server: str
    message: str
    mode: Literal["form", "url"] = "form"
    schema: dict[str, Any] | None = None
    url: str | None = None


class Answer(NamedTuple):
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


DECLINE = Answer("decline")


class Progress(NamedTuple):
    """A server's progress notification for a call of tool ``name`` (as the model
    called it); ``done`` once the call has ended."""

    server: str
    name: str
    progress: float = 0.0
    total: float | None = None
    message: str | None = None
    done: bool = False


if TYPE_CHECKING:  # types only: a Protocol class and a Literal cost start-up time (P1)
    from typing import Protocol

    Decision = Literal["approved", "declined", "unasked"]
    """An asker's answer to a call: approved, declined by the user, or not asked."""

    class Asker(Protocol):
        """What an application supplies to put questions to its user."""

        async def approve(self, call: ToolCall) -> Decision: ...

        async def elicit(self, request: Elicitation) -> Answer | None:
            """The user's answer, or None when there is no one to ask."""
            ...

        # An asker may also have ``progress(update: Progress) -> None``, to show
        # how a call is getting on; it is called on the turn's event loop.


class Interaction(NamedTuple):
    """How a service's MCP servers reach the user: ``asker`` (None: no one to
    ask), ``approve_all`` (every call of this run is approved, as on request of
    the user) and ``elicitation`` (a policy over every server's own, e.g.
    ``"decline"`` for a server that must never be asked)."""

    asker: "Asker | None" = None
    approve_all: bool = False
    elicitation: str | None = None
