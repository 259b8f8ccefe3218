"""Write ``openai-openapi.json``: the part of OpenAI's published OpenAPI
description that ``foliko serve`` answers to (see README.md).

    python tests/serve/openai_spec/extract.py PATH/TO/openai-openapi/openapi.json

Keeps the answers (200) of the paths listed below and every schema they
reach, without descriptions and ``x-`` annotations; nothing else changes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PATHS = [
    "/responses",
    "/responses/{response_id}",
    "/responses/{response_id}/cancel",
    "/responses/{response_id}/input_items",
    "/responses/input_tokens",
    "/responses/compact",
    "/conversations",
    "/conversations/{conversation_id}",
    "/conversations/{conversation_id}/items",
    "/conversations/{conversation_id}/items/{item_id}",
    "/chat/completions",
    "/chat/completions/{completion_id}",
    "/chat/completions/{completion_id}/messages",
    "/models",
    "/models/{model}",
]


def _bare(node: Any) -> Any:
    """The schema without its descriptions and ``x-`` annotations (a property
    named ``description`` stays)."""
    if isinstance(node, list):
        return [_bare(item) for item in node]
    if not isinstance(node, dict):
        return node
    kept = {}
    for key, value in node.items():
        if key.startswith("x-") or (key == "description" and isinstance(value, str)):
            continue
        kept[key] = {k: _bare(v) for k, v in value.items()} if key == "properties" else _bare(value)
    return kept


def main(source: str) -> None:
    spec = json.loads(Path(source).read_text())
    schemas = spec["components"]["schemas"]
    kept: dict[str, Any] = {}

    def reach(node: Any) -> None:
        if isinstance(node, dict):
            name = node.get("$ref", "").rpartition("/")[2]
            if name and name not in kept:
                kept[name] = _bare(schemas[name])
                reach(schemas[name])
            for value in node.values():
                reach(value)
        elif isinstance(node, list):
            for value in node:
                reach(value)

    paths: dict[str, Any] = {}
    for path in PATHS:
        for method, operation in spec["paths"][path].items():
            answer = operation.get("responses", {}).get("200", {})
            content = {kind: body["schema"] for kind, body in answer.get("content", {}).items()}
            paths.setdefault(path, {})[method] = content
            reach(content)
    out = {
        "openapi": spec["openapi"],
        "info": {"title": spec["info"]["title"], "version": spec["info"]["version"]},
        "paths": paths,
        "components": {"schemas": dict(sorted(kept.items()))},
    }
    target = Path(__file__).with_name("openai-openapi.json")
    target.write_text(json.dumps(out, indent=1, sort_keys=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
