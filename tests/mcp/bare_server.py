"""The smallest MCP server over stdio: JSON-RPC lines by hand, no SDK to import,
so it is ready in milliseconds (the start-up timeout tests time foliko, not it).

It answers ``initialize`` (2025-11-25) and ``tools/list`` (one tool, ``hello``),
refuses every other request (so a client that probes ``server/discover`` falls
back to ``initialize``) and ignores notifications.
"""

import json
import sys

TOOLS = [{"name": "hello", "description": "Say hello.", "inputSchema": {"type": "object"}}]

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    if message.get("method") == "initialize":
        result = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "bare", "version": "1"},
        }
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
    elif message.get("method") == "tools/list":
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": {"tools": TOOLS}}
    else:
        error = {"code": -32601, "message": "Method not found"}
        reply = {"jsonrpc": "2.0", "id": message["id"], "error": error}
    print(json.dumps(reply), flush=True)
