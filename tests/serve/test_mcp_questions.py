"""foliko serve asks no one: an MCP tool call the model chose that needs
approval is refused unless the config approves it (a ``/tool`` the client
typed is the client's own call), and every elicitation is declined, even
where the config says ``elicitation = "defaults"``."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx2 as httpx
from models.fake_servers import chooses_tools

ASKING_SERVER = Path(__file__).parents[1] / "mcp" / "asking_server.py"


def _reply(server, text: str, model: str = "openai:chooser") -> str:
    response = httpx.post(
        server.url + "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": text}]},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def test_serve_refuses_unapproved_calls_and_declines_questions(
    start_server, tmp_path, model_server
):
    config = tmp_path / "config.toml"
    config.write_text(
        'serve_tools = ["u__note", "u__paint", "u__look"]\n'
        "[mcp_servers.u]\n"
        f'command = "{sys.executable}"\n'
        f'args = ["{ASKING_SERVER}"]\n'
        'approve = ["paint"]\n'
        'elicitation = "defaults"\n'
    )
    model_server.default = chooses_tools
    upstream = {"OPENAI_BASE_URL": f"{model_server.url}/v1", "OPENAI_API_KEY": "sk-test"}
    server = start_server(env={"FOLIKO_CONFIG": str(config), **upstream})
    assert _reply(server, '/tool u__note {"text": "y"}', "echo") == "u__note returned: noted y"
    assert _reply(server, '/tool u__note {"text": "x"}') == (
        "u__note returned: error: u__note needs the user's approval and there was no one to "
        "ask; it was not run (the user can approve it in foliko's config)"
    )
    assert _reply(server, "/tool u__look") == "u__look returned: looked"
    assert _reply(server, "/tool u__paint") == "u__paint returned: decline"
    server.stop()
    assert (
        "MCP tool 'u__note' was refused: it needs approval and there is no one to ask; approve "
        'it with approve = "always" or approve = ["note"] in [mcp_servers.u]'
    ) in server.stderr
