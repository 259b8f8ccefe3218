"""``GET /v1/search``: every session's messages by their text (``sessions search``).

Each hit is the CLI's ``--json`` row (``session_id``, ``seq``: the message's
position, ``snippet`` with the ``matches`` spans, ...) plus its session's
``title``. A damaged session is left out and named in ``unreadable``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.routing import Route

from foliko_cli.serve.common import JSON, query_int, service
from foliko_cli.serve.errors import ApiError


async def search(request: Request):
    query = request.query_params.get("q", "")
    if not query.strip():
        raise ApiError(400, "give the words to search for as ?q=WORDS", param="q")
    limit = query_int(request, "limit", 20, 1, 200)
    svc = service(request)
    unreadable: list[str] = []

    def left_out(damage) -> None:
        if damage.session_id not in unreadable:
            unreadable.append(damage.session_id)

    hits = await svc.search(query, limit=limit, on_unreadable=left_out)
    titles = await svc.session_titles(list(dict.fromkeys(hit.session_id for hit in hits)))
    rows = [{**hit.to_dict(), "title": titles.get(hit.session_id)} for hit in hits]
    return JSON({"object": "list", "data": rows, "unreadable": unreadable})


routes = [Route("/v1/search", search, methods=["GET"])]
