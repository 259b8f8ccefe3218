"""Config checked: an unknown key in any table of a config file is one line naming
the key, the table and the closest known key — exit 2 for a command that reads
that table, a warning (once) for any other."""

from __future__ import annotations

from pathlib import Path

import pytest
from trusting import trust

TYPOS = {
    "models": (
        '[models.smol]\nmodel = "echo"\ncontxt_window = 1024\n',
        "contxt_window",
        "context_window",
    ),
    "agents": ('[agents.helper]\nsytem_prompt = "Be kind."\n', "sytem_prompt", "system_prompt"),
    "mcp_servers": ('[mcp_servers.files]\ncommand = "npx"\narg = ["-y"]\n', "arg", "args"),
}
USERS = {
    "models": [("chat", "-s", "s", "-m", "echo", "hi"), ("models", "list", "-q")],
    "agents": [("chat", "-s", "s", "-m", "echo", "hi"), ("agents", "list", "-q")],
    "mcp_servers": [("chat", "-s", "s", "-m", "echo", "hi"), ("mcp", "list"), ("tools", "list")],
}
OTHERS = [("sessions", "list"), ("usage",), ("config", "show", "-q"), ("storage", "info")]


def expected(path: Path, table: str) -> str:
    text, key, closest = TYPOS[table]
    name = text.split("]")[0].split(".")[1]
    return (
        f"config file {path}: unknown key {key!r} in [{table}.{name}] "
        f"(did you mean {closest!r}?); fix or remove it"
    )


@pytest.mark.parametrize(
    ("table", "words"),
    [(table, words) for table, commands in USERS.items() for words in commands],
    ids=lambda value: value if isinstance(value, str) else " ".join(value[:2]),
)
def test_a_command_that_reads_the_table_stops_on_the_unknown_key(invoke, tmp_path, table, words):
    config = tmp_path / "foliko.toml"
    config.write_text(TYPOS[table][0])

    result = invoke(*words)

    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"foliko: error: {expected(config, table)}"]


@pytest.mark.parametrize("table", list(TYPOS))
@pytest.mark.parametrize("words", OTHERS, ids=lambda w: " ".join(w))
def test_any_other_command_warns_once_and_goes_on(invoke, tmp_path, table, words):
    config = tmp_path / "foliko.toml"
    config.write_text(TYPOS[table][0])
    trust(config)  # else a second line says it is not trusted

    result = invoke(*words)

    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == [f"foliko: warning: {expected(config, table)}"]


def test_a_typo_in_the_user_file_is_named_with_that_file(invoke):
    import os

    user = Path(os.environ["FOLIKO_CONFIG"])
    user.write_text(TYPOS["models"][0])

    result = invoke("models", "list")

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"foliko: error: {expected(user, 'models')}"]


def test_a_typo_at_the_top_level_names_the_closest_setting(invoke, tmp_path):
    (tmp_path / "foliko.toml").write_text('modle = "echo"\n')

    result = invoke("sessions", "list")

    assert result.exit_code == 2
    assert "unknown setting 'modle' in the top level (did you mean 'model'?)" in result.stderr


def test_a_key_far_from_any_lists_the_known_ones(invoke, tmp_path):
    (tmp_path / "foliko.toml").write_text('[models.m]\nmodel = "echo"\nxyzzy = 1\n')

    result = invoke("models", "list")

    assert result.exit_code == 2
    assert "unknown key 'xyzzy' in [models.m] (known: model, base_url, api_key_env" in result.stderr


def test_an_alias_whose_model_is_not_provider_model_names_the_alias_not_a_contradiction(
    invoke, tmp_path
):
    (tmp_path / "foliko.toml").write_text('[models.smol]\nmodel = "smollm"\n')

    result = invoke("chat", "-s", "s", "-m", "smol", "hi")

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "foliko: error: model 'smol' ([models.smol]): its model 'smollm' is not provider:model "
        'with a provider foliko has; write e.g. model = "openai:MODEL" (or echo, ollama:MODEL, '
        "anthropic:MODEL)"
    ]
    assert "configured: smol" not in result.stderr


def test_an_alias_without_a_model_key_says_so(invoke, tmp_path):
    (tmp_path / "foliko.toml").write_text("[models.smol]\ncontext_window = 1024\n")

    result = invoke("chat", "-s", "s", "-m", "smol", "hi")

    assert result.exit_code == 2
    assert "model 'smol' ([models.smol]) has no model key; add one: model = " in result.stderr


def test_an_alias_named_as_a_model_needs_no_model_key(invoke, tmp_path):
    (tmp_path / "foliko.toml").write_text("[models.echo]\ncontext_window = 5000\n")

    result = invoke("models", "list", "--json")

    assert result.exit_code == 0, result.stderr
    assert '"context_window":5000' in result.stdout


def test_the_library_refuses_an_unknown_key_in_the_alias_it_uses(tmp_path, foliko_home):
    from foliko_cli.errors import UsageError
    from foliko_cli.models import model_spec

    with pytest.raises(UsageError, match=r"unknown key 'contxt_window' in \[models.smol\]"):
        model_spec("smol", {"smol": {"model": "echo", "contxt_window": 1}})
