"""One declaration per HTTP body: the msgspec types that read a request, shape
its answer and describe both in ``/openapi.json`` (openapi.py).

A route module declares its routes with an ``Api``::

    api = Api("Conversations")

    @api.post("/v1/conversations", body=ConversationCreate, answer=Conversation)
    async def create_conversation(request: Request, body: ConversationCreate): ...

The handler's docstring (its first paragraph) is the operation's summary. It
gets the body decoded into its type (and ``query``: the query parameters as
theirs); what it returns is sent as JSON, unless it is a Response already.
A body or a query that breaks its type is a 400 in OpenAI's error shape:
``param`` names the request's parameter, the message where in it the
problem is and what is taken (the choices of an enum, the fields of an
object).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, TypeVar, cast

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from foliko_cli.serve.errors import ApiError

T = TypeVar("T")
Handler = Callable[..., Awaitable[Any]]
H = TypeVar("H", bound=Handler)

REF = "#/components/schemas/{name}"
_AT = re.compile(r" - at `(key` in `)?\$([^`]*)`\Z")
_PARAM = re.compile(r"\.(\w+)")
_SEGMENT = re.compile(r"\.(\w+)|\[(\d+|\.\.\.)\]")
_KINDS = {
    "object": "an object",
    "array": "a list",
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "null": "null",
}
_BOUNDS = {"<=": "at most", ">=": "at least", "<": "below", ">": "above"}
_SIZES = {"str": "characters", "array": "items", "object": "pairs"}
_OVER = {
    "str": "is over {} characters; shorten it",
    "array": "holds over {} items; send fewer",
    "object": "holds over {} pairs; send fewer",
}


class JSON(Response):
    """An answer as JSON: msgspec types, and the plain values around them."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return msgspec.json.encode(content)


# reading a request


@functools.cache
def _decoder(kind: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(kind)


def decode(raw: bytes, kind: type[T]) -> T:
    """The request body as ``kind`` (an empty body is an empty object); a 400
    naming what is wrong otherwise."""
    if not raw.strip() and isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        raw = b"{}"
    try:
        return cast(T, _decoder(kind).decode(raw))  # type: ignore[arg-type]
    except msgspec.ValidationError as exc:
        raise invalid(str(exc), kind) from None
    except msgspec.DecodeError as exc:
        problem = str(exc).removeprefix("JSON is malformed: ")
        raise ApiError(400, f"the request body is not valid JSON: {problem}") from None


def convert(data: Any, kind: type[T]) -> T:
    """``data`` (parsed JSON) as ``kind``; a 400 naming what is wrong otherwise."""
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as exc:
        raise invalid(str(exc), kind) from None


def from_query(request: Request, kind: type[T]) -> T:
    """The query parameters as ``kind``: text read as the field's type, and
    ``NAME[KEY]=VALUE`` as the pairs of the object ``NAME``."""
    fields: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        outer, bracket, key = name.partition("[")
        if bracket and key.endswith("]"):
            fields.setdefault(outer, {})[key[:-1]] = value
        else:
            fields[name] = value
    try:
        return msgspec.convert(fields, kind, strict=False)
    except msgspec.ValidationError as exc:
        raise invalid(str(exc), kind) from None


def invalid(text: str, kind: Any) -> ApiError:
    """msgspec's account of a value that breaks ``kind``, as a 400 that names
    the parameter (the body's top-level field) and says what is taken."""
    found = _AT.search(text)
    problem, path = (text[: found.start()], found[2]) if found else (text, "")
    where = path.lstrip(".")
    param = found_param[1] if (found_param := _PARAM.match(path)) else None
    if found and found[1]:
        where = f"a key of {where}"
    elif where.endswith("[...]"):
        where = f"a value of {where[:-5]}"
    if problem.startswith("Object contains unknown field"):
        name = problem.split("`")[1]
        allowed = ", ".join(_at(kind, path, "properties").get("properties", ()))
        field_at = f"{where}.{name}" if where else name
        return ApiError(400, f"unknown field {field_at!r}; it takes {allowed}", param=name)
    if problem.startswith("Object missing required field"):
        name = problem.split("`")[1]
        required = f"{where}.{name}" if where else name
        return ApiError(400, f"{required} is required", param=param or name)
    if not where and problem.startswith("Expected `object`"):
        return ApiError(400, "the request body must be a JSON object")
    phrase = _phrase(problem, kind, path, where)
    if phrase is None:
        return ApiError(400, f"{where}: {problem}" if where else problem, param=param)
    return ApiError(400, f"{where} {phrase}", param=param)


def _phrase(problem: str, kind: Any, path: str, where: str) -> str | None:
    """msgspec's problem in the words of an answer (None: its own are best)."""
    if match := re.match(r"Expected `([^`]+)`, got `(\w+)`", problem):
        wanted = " or ".join(_KINDS.get(k, k) for k in match[1].split(" | "))
        return f"has the wrong type ({_KINDS.get(match[2], match[2])}); {where} must be {wanted}"
    if match := re.match(r"Expected `(\w+)` of length (\S+) (\d+)", problem):
        kind, bound, size = match[1], match[2], int(match[3])
        if bound == "<=":
            return _OVER.get(kind, "is over {}").format(f"{size:,}")
        return "must not be empty" if size == 1 else f"must hold at least {size:,} {_SIZES[kind]}"
    if problem.startswith("Expected `str` matching regex"):
        return f"must be {_at(kind, path, 'description').get('description', 'as documented')}"
    if match := re.match(r"Expected `(\w+)` (\S+) (\S+)", problem):
        return f"must be {_BOUNDS.get(match[2], match[2])} {match[3]}"
    if problem.startswith("Invalid base64"):
        return "is not base64"
    if match := re.match(r"Invalid (?:enum )?value (.+)", problem):
        choices = _at(kind, path, "enum").get("enum")
        taken = f"; use {', '.join(map(str, choices))}" if choices else ""
        return f"{match[1]} is not supported{taken}"
    return None


def _at(kind: Any, path: str, wanted: str) -> dict[str, Any]:
    """The JSON Schema of what sits at ``path`` in a value of ``kind``: of a
    union, the branch that has ``wanted`` ({}: unknown)."""
    schema, components = _schema_of(kind)
    for name, index in _SEGMENT.findall(path):
        schema = _resolved(schema, components, "properties" if name else "items")
        if name:
            schema = schema.get("properties", {}).get(name, {})
        else:
            schema = schema.get("items" if index != "..." else "additionalProperties") or {}
    return _resolved(schema, components, wanted)


def _resolved(schema: Any, components: dict[str, Any], wanted: str) -> dict[str, Any]:
    """``schema`` with its reference followed, or its union's branch that has ``wanted``."""
    if not isinstance(schema, dict):
        return {}
    if "$ref" in schema:
        schema = components.get(schema["$ref"].rpartition("/")[2], {})
    for branch in schema.get("anyOf", ()):
        branch = _resolved(branch, components, wanted)
        if wanted in branch:
            return branch
    return cast("dict[str, Any]", schema)


@functools.cache
def _schema_of(kind: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    (schema,), components = msgspec.json.schema_components([kind], ref_template=REF)
    return schema, components


# declaring routes


class Operation(NamedTuple):
    """What ``/openapi.json`` says of a route: its summary and the types of
    its body, query, answer and streamed events (``content``: an answer other
    than JSON, as media type -> schema)."""

    summary: str
    tag: str
    body: Any = None
    answer: Any = None
    query: Any = None
    events: Any = None
    content: dict[str, Any] | None = None
    public: bool = False


class Api:
    """The routes of one resource, each declared with its types (see above)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.routes: list[Route] = []

    def route(self, method: str, path: str, **types: Any) -> Callable[[H], H]:
        def declare(handler: H) -> H:
            summary = (handler.__doc__ or "").strip().split("\n\n")[0]
            assert summary, f"{handler.__name__}: its docstring is the operation's summary"
            tag = types.pop("tag", self.tag)
            operation = Operation(" ".join(summary.split()), tag, **types)
            route = Route(path, _endpoint(handler, operation), methods=[method])
            route.operation = operation  # type: ignore[attr-defined]
            self.routes.append(route)
            return handler

        return declare

    def get(self, path: str, **types: Any) -> Callable[[H], H]:
        return self.route("GET", path, **types)

    def post(self, path: str, **types: Any) -> Callable[[H], H]:
        return self.route("POST", path, **types)

    def put(self, path: str, **types: Any) -> Callable[[H], H]:
        return self.route("PUT", path, **types)

    def patch(self, path: str, **types: Any) -> Callable[[H], H]:
        return self.route("PATCH", path, **types)

    def delete(self, path: str, **types: Any) -> Callable[[H], H]:
        return self.route("DELETE", path, **types)


def _endpoint(handler: Handler, operation: Operation) -> Callable[[Request], Awaitable[Response]]:
    body, query = operation.body, operation.query

    async def endpoint(request: Request) -> Response:
        given: dict[str, Any] = {}
        if body is not None:
            given["body"] = decode(await request.body(), body)
        if query is not None:
            given["query"] = from_query(request, query)
        answer = await handler(request, **given)
        return answer if isinstance(answer, Response) else JSON(answer)

    endpoint.__name__ = handler.__name__
    return endpoint
