"""Tools from Model Context Protocol servers (SPEC F12, F16).

``config`` parses the ``[mcp_servers.NAME]`` tables; ``manager`` offers the
servers' tools to a turn (from ``cache`` when they were listed before,
starting a server only when its tools are called or not yet known), sees
that each call is approved and answers the servers' questions
(``asking``, ``forms``). Only ``connection`` and ``transport`` import the
``mcp`` package (``group`` anyio), and only when a server is started.
"""
