"""foliko's sessions offered to other MCP hosts: ``foliko mcp serve`` over stdio
and ``/mcp`` in ``foliko serve`` (SPEC F16).

``tools``, ``resources`` and ``prompts`` say what the server offers, over the
service and without the ``mcp`` package; ``server`` turns them into the
SDK's low-level ``Server`` (the only module here that imports ``mcp``,
besides ``stdio``); a ``Backend`` gives each request its service (the one
of the process, or the user's under ``foliko serve --api-keys``).
"""
