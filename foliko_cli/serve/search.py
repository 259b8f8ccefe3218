"""``GET /v1/search``: every session's messages by their text (``sessions search``).

Each hit is the CLI's ``--json`` row (``session_id``, ``seq``: the message's
position, ``snippet`` with the ``matches`` spans, ...) plus its session's
``title``. A damaged session is left out and named in ``unreadable``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.requests import Request

from foliko_cli.serve.common import service
from foliko_cli.serve.errors import ApiError
from foliko_cli.serve.native_types import SearchQuery, SearchResults
from foliko_cli.serve.schema import Api

if TYPE_CHECKING:
    from foliko_cli.errors import CorruptSessionError

api = Api("Sessions")


@api.get("/v1/search", query=SearchQuery, answer=SearchResults)
async def search(request: Request, query: SearchQuery) -> Any:
    """Messages by their text, best first (``sessions search --json``)."""
    if not query.q.strip():
        raise ApiError(400, "give the words to search for as ?q=WORDS", param="q")
    svc = service(request)
    unreadable: list[str] = []

    def left_out(damage: CorruptSessionError) -> None:
        if damage.session_id not in unreadable:
            unreadable.append(damage.session_id)

    hits = await svc.search(query.q, limit=query.limit, on_unreadable=left_out)
    labels = await svc.session_labels(list(dict.fromkeys(hit.session_id for hit in hits)))
    rows: list[Any] = [{**hit.to_dict(), "title": labels[hit.session_id]["title"]} for hit in hits]
    return SearchResults(data=rows, unreadable=unreadable)


routes = api.routes
