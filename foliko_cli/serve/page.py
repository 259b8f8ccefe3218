"""The web page at ``/``: one HTML file with its script, served as it is."""

from __future__ import annotations

from importlib.resources import files

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route


def _page() -> str:
    return files("foliko_cli.serve").joinpath("static/index.html").read_text(encoding="utf-8")


async def index(request: Request):
    return HTMLResponse(_page(), headers={"cache-control": "no-cache"})


async def favicon(request: Request):
    return Response(status_code=204)


routes = [
    Route("/", index, methods=["GET"]),
    Route("/favicon.ico", favicon, methods=["GET"]),
]
