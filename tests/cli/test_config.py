"""`foliko config show|path`, the TOML files and the precedence
flags > FOLIKO_* env > ./foliko.toml > user file > defaults, key by key."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from trusting import trust

from foliko_cli.common.settings import FIELDS, display_name

from .locks import held


@pytest.fixture
def places(tmp_path, monkeypatch):
    """A project directory as cwd, a user file via FOLIKO_CONFIG, isolated XDG dirs."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    user = tmp_path / "user.toml"
    user.touch()
    monkeypatch.setenv("FOLIKO_CONFIG", str(user))
    return {"project": project / "foliko.toml", "user": user, "tmp": tmp_path}


def shown(invoke, *global_args: str, env: dict[str, str] | None = None) -> dict[str, tuple]:
    result = invoke(*global_args, "config", "show", "--json", env=env)
    assert result.exit_code == 0, result.stderr
    return {row["key"]: (row["value"], row["source"]) for row in orjson.loads(result.stdout)}


def toml_value(value) -> str:
    return orjson.dumps(value).decode()  # JSON scalars are valid TOML scalars


def write_toml(path: Path, **values) -> None:
    """Write the settings; a project file is trusted (what trust holds back is
    tested in test_trust.py)."""
    path.write_text("".join(f"{key} = {toml_value(v)}\n" for key, v in values.items()))
    if path.name == "foliko.toml":
        trust(path)


# config show


def test_show_lists_every_key_with_defaults(invoke, places, foliko_home):
    rows = shown(invoke)
    assert list(rows) == [display_name(key) for key in FIELDS]  # no [models] or [agents]
    assert rows["home"] == (str(foliko_home), "env FOLIKO_HOME")
    assert rows["storage"] == ("sqlite", "default")
    assert rows["model"] == (None, "default")
    assert rows["timeout"] == (120.0, "default")
    assert rows["max_steps"] == (10, "default")
    assert rows["system_prompt"] == (None, "default")
    assert rows["trash.keep"] == ("30d", "default")
    for key in FIELDS:
        if key != "home":
            assert rows[display_name(key)][1] == "default", key


def test_show_default_home_is_the_platform_data_dir(invoke, places, monkeypatch):
    monkeypatch.delenv("FOLIKO_HOME")
    rows = shown(invoke)
    assert rows["home"] == (str(places["tmp"] / "xdg-data" / "foliko"), "default")


def test_show_formats(invoke, places):
    tsv = invoke("config", "show").stdout.splitlines()
    assert tsv[0] == "key\tvalue\tsource"
    assert "storage\tsqlite\tdefault" in tsv
    assert invoke("config", "show", "--format", "tsv").stdout.splitlines() == tsv
    table = invoke("config", "show", "--format", "table").stdout.splitlines()
    assert table[0].split() == ["key", "value", "source"]
    assert any(line.split() == ["storage", "sqlite", "default"] for line in table)
    ndjson = invoke("config", "show", "--ndjson").stdout.splitlines()
    assert [orjson.loads(line)["key"] for line in ndjson] == [display_name(k) for k in FIELDS]


def test_show_sources_from_each_layer(invoke, places, monkeypatch):
    write_toml(places["user"], model="echo:user", max_steps=4)
    write_toml(places["project"], timeout=30, system_prompt="from project")
    monkeypatch.setenv("FOLIKO_STORAGE", "json")
    rows = shown(invoke)
    assert rows["model"] == ("echo:user", f"user {places['user']}")
    assert rows["max_steps"] == (4, f"user {places['user']}")
    assert rows["timeout"] == (30.0, f"project {places['project']}")
    assert rows["system_prompt"] == ("from project", f"project {places['project']}")
    assert rows["storage"] == ("json", "env FOLIKO_STORAGE")
    assert shown(invoke, "--storage", "memory")["storage"] == ("memory", "flag")


SAMPLES = {
    # key: (user, project, env, expected user/project/env values as shown)
    "storage": ("json:////u", "json:////p", "sqlite:////e.db", None),
    "model": ("echo:u", "echo:p", "echo:e", None),
    "timeout": (11, 12.5, "13", (11.0, 12.5, 13.0)),
    "max_steps": (1, 2, "3", (1, 2, 3)),
    "system_prompt": ("u", "p", "e", None),
    "context_window": (1000, 2000, "3000", (1000, 2000, 3000)),
    "home": ("u-home", "p-home", "e-home", None),
}


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_precedence_key_by_key(invoke, places, monkeypatch, key):
    if key not in FIELDS:
        pytest.skip(f"{key} is not a setting in this version")
    user_value, project_value, env_value, as_shown = SAMPLES[key]
    as_shown = as_shown or (user_value, project_value, env_value)
    default = FIELDS[key].default
    env = "FOLIKO_" + key.upper()
    write_toml(places["user"], **{key: user_value})
    write_toml(places["project"], **{key: project_value})
    monkeypatch.setenv(env, env_value)
    if key == "storage":
        assert shown(invoke, "--storage", "memory")[key] == ("memory", "flag")
    assert shown(invoke)[key] == (as_shown[2], f"env {env}")
    monkeypatch.delenv(env)
    if key == "home":  # the trust store is in the user's home, which just changed
        trust(places["project"])
    assert shown(invoke)[key] == (as_shown[1], f"project {places['project']}")
    places["project"].unlink()
    assert shown(invoke)[key] == (as_shown[0], f"user {places['user']}")
    places["user"].write_text("")
    value, source = shown(invoke)[key]
    assert source == "default"
    if key == "home":
        assert value == str(places["tmp"] / "xdg-data" / "foliko")
    else:
        assert value == default


def test_empty_env_value_does_not_count(invoke, places, monkeypatch):
    write_toml(places["project"], model="echo:p")
    monkeypatch.setenv("FOLIKO_MODEL", "")
    assert shown(invoke)["model"] == ("echo:p", f"project {places['project']}")


def test_user_file_in_the_platform_config_dir(invoke, places, monkeypatch):
    monkeypatch.delenv("FOLIKO_CONFIG")
    user = places["tmp"] / "xdg-config" / "foliko" / "config.toml"
    user.parent.mkdir(parents=True)
    write_toml(user, model="echo:platform")
    assert shown(invoke)["model"] == ("echo:platform", f"user {user}")


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        (
            "postgresql://alice:s3cret@db.example:5432/foliko",
            "postgresql://alice:***@db.example:5432/foliko",
        ),
        ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
    ],
)
@pytest.mark.parametrize("layer", ["flag", "env", "project", "user"])
def test_storage_password_is_redacted(invoke, places, monkeypatch, url, redacted, layer):
    global_args: tuple[str, ...] = ()
    if layer == "flag":
        global_args = ("--storage", url)
    elif layer == "env":
        monkeypatch.setenv("FOLIKO_STORAGE", url)
    else:
        write_toml(places[layer], storage=url)
    assert shown(invoke, *global_args)["storage"][0] == redacted
    for fmt in ("json", "ndjson", "tsv", "table"):
        result = invoke(*global_args, "config", "show", "--format", fmt)
        assert result.exit_code == 0
        assert "s3cret" not in result.stdout + result.stderr
        assert redacted in result.stdout


def test_url_without_password_is_shown_as_is(invoke, places):
    url = "postgresql://alice@db.example/foliko"
    assert shown(invoke, "--storage", url)["storage"] == (url, "flag")


@pytest.mark.parametrize("url", ["ftp://alice:s3cret@host/x", "sqlite://alice:s3cret@host/x.db"])
def test_storage_password_never_appears_in_errors(invoke, places, url):
    result = invoke("--storage", url, "chat", "-s", "s", "hi")
    assert result.exit_code == 2
    assert "s3cret" not in result.stderr


# config path


def test_path_prints_user_then_project_file(invoke, places):
    result = invoke("config", "path")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [str(places["user"]), str(places["project"])]


def test_path_without_foliko_config_uses_the_platform_dir(invoke, places, monkeypatch):
    monkeypatch.delenv("FOLIKO_CONFIG")
    lines = invoke("config", "path").stdout.splitlines()
    assert lines == [
        str(places["tmp"] / "xdg-config" / "foliko" / "config.toml"),
        str(places["project"]),
    ]


# bad files and values


@pytest.mark.parametrize("layer", ["project", "user"])
@pytest.mark.parametrize(
    "content",
    [b"model = ", b"[unclosed", b"model = 'a'\nmodel = 'b'\n", b'model = "caf\xe9"\n'],
)
def test_invalid_toml_exits_2_naming_the_file(invoke, places, layer, content):
    places[layer].write_bytes(content)
    for args in (["config", "show"], ["chat", "-s", "s", "hi"], ["sessions", "list"]):
        result = invoke(*args)
        assert result.exit_code == 2, args
        assert result.stdout == ""
        assert f"config file {places[layer]}" in result.stderr
        assert "not valid TOML" in result.stderr


@pytest.mark.parametrize("layer", ["project", "user"])
def test_unknown_key_exits_2(invoke, places, layer):
    places[layer].write_text('modle = "echo"\n')
    result = invoke("config", "show")
    assert result.exit_code == 2
    assert f"config file {places[layer]}" in result.stderr
    assert "unknown setting 'modle'" in result.stderr


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("timeout = -1", "timeout"),
        ("timeout = 0", "timeout"),
        ('timeout = "soon"', "timeout"),
        ('max_steps = "x"', "max_steps"),
        ("max_steps = 0", "max_steps"),
        ("max_steps = 1.5", "max_steps"),
        ("max_steps = true", "max_steps"),
        ("system_prompt = 3", "system_prompt"),
        ("model = [1]", "model"),
        ("storage = {}", "storage"),
    ],
)
@pytest.mark.parametrize("layer", ["project", "user"])
def test_bad_value_in_a_file_exits_2(invoke, places, line, key, layer):
    places[layer].write_text(line + "\n")
    result = invoke("config", "show")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"setting {key!r} from {layer} {places[layer]}" in result.stderr


@pytest.mark.parametrize(
    ("name", "value"),
    [("FOLIKO_TIMEOUT", "-1"), ("FOLIKO_TIMEOUT", "abc"), ("FOLIKO_MAX_STEPS", "x")],
)
def test_bad_value_in_the_environment_exits_2(invoke, places, monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    result = invoke("chat", "-s", "s", "hi")
    assert result.exit_code == 2
    assert f"from env {name}" in result.stderr
    assert "could not convert" not in result.stderr and "invalid literal" not in result.stderr
    assert result.stderr.count("\n") == 1
    assert not (Path(os.environ["FOLIKO_HOME"]) / "sessions.db").exists()


def test_flag_wins_over_a_bad_environment_value(invoke, places, monkeypatch):
    monkeypatch.setenv("FOLIKO_TIMEOUT", "-1")
    assert invoke("chat", "-s", "s", "hi").exit_code == 2
    assert invoke("chat", "-s", "s", "hi", "--timeout", "5").exit_code == 0


def test_model_flag_wins_over_env_project_and_user(invoke, places, monkeypatch):
    write_toml(places["user"], model="nosuch:user")
    write_toml(places["project"], model="nosuch:project")
    monkeypatch.setenv("FOLIKO_MODEL", "nosuch:env")
    result = invoke("chat", "-s", "s", "hi")
    assert result.exit_code == 2
    assert "'nosuch:env'" in result.stderr
    assert invoke("chat", "-s", "s", "hi", "-m", "echo").exit_code == 0
    monkeypatch.delenv("FOLIKO_MODEL")
    assert "'nosuch:project'" in invoke("chat", "-s", "s", "hi").stderr
    places["project"].unlink()
    assert "'nosuch:user'" in invoke("chat", "-s", "s", "hi").stderr


# settings take effect


def test_project_storage_json_makes_chat_write_json_files(invoke, places, foliko_home):
    write_toml(places["project"], storage="json")
    assert invoke("chat", "-s", "s", "hi").exit_code == 0
    assert (foliko_home / "sessions" / "s.json").is_file()
    assert not (foliko_home / "sessions.db").exists()
    rows = orjson.loads(invoke("sessions", "list", "--json").stdout)
    assert [r["session_id"] for r in rows] == ["s"]


def test_user_storage_url_takes_effect(invoke, places):
    target = places["tmp"] / "elsewhere.db"
    write_toml(places["user"], storage=f"sqlite:///{target}")
    assert invoke("chat", "-s", "s", "hi").exit_code == 0
    assert target.is_file()


def test_home_from_the_project_file(invoke, places, monkeypatch):
    monkeypatch.delenv("FOLIKO_HOME")
    home = places["tmp"] / "project-home"
    write_toml(places["project"], home=str(home))
    assert invoke("chat", "-s", "s", "hi", "-m", "echo").exit_code == 0
    assert (home / "sessions.db").is_file()


def test_system_prompt_setting_appears_in_dry_run(invoke, places, show):
    write_toml(places["user"], system_prompt="You are a pirate.")
    data = orjson.loads(invoke("chat", "-s", "s", "hi", "--dry-run").stdout)
    assert data["system"] == "You are a pirate."
    invoke("chat", "-s", "s", "hi")
    own = orjson.loads(invoke("chat", "-s", "t", "hi", "--dry-run", "--system", "own").stdout)
    assert own["system"] == "own"


def test_max_steps_setting_bounds_the_tool_loop(invoke, places):
    write_toml(places["project"], max_steps=1)
    data = orjson.loads(invoke("chat", "-s", "s", "/tool get_session_info", "--json").stdout)
    assert data["step_count"] == 1
    assert data["finish_reason"] == "max_steps"


def test_model_setting_is_used_by_chat(invoke, places):
    write_toml(places["user"], model="nosuch:model")
    result = invoke("chat", "-s", "s", "hi")
    assert result.exit_code == 2
    assert "unknown model 'nosuch:model'" in result.stderr


def test_timeout_setting_bounds_the_wait_for_a_busy_session(invoke, places, foliko_home):
    write_toml(places["project"], timeout=0.1)
    assert invoke("chat", "-s", "s", "hi").exit_code == 0
    with held(foliko_home, "s"):
        result = invoke("chat", "-s", "s", "again")
    assert result.exit_code == 4
    assert "busy" in result.stderr


# FOLIKO_CONFIG, the project file upwards, the tables in config show


def test_a_foliko_config_that_does_not_exist_exits_2(invoke, tmp_path):
    """Was: silently ignored."""
    missing = tmp_path / "nope" / "config.toml"
    for command in (["config", "show"], ["sessions", "list"], ["chat", "-s", "s", "hi"]):
        result = invoke(*command, env={"FOLIKO_CONFIG": str(missing)})
        assert result.exit_code == 2
        assert result.stdout == ""
        assert str(missing) in result.stderr and "FOLIKO_CONFIG" in result.stderr
    assert not (tmp_path / "home").exists() or invoke("sessions", "list", "-q").stdout == ""


def test_the_project_file_is_found_in_a_parent_directory(invoke, places):
    root = places["project"].parent
    (root / "foliko.toml").write_text('model = "echo"\n')
    deep = root / "src" / "pkg"
    deep.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(deep)
        assert shown(invoke)["model"] == ("echo", f"project {root / 'foliko.toml'}")
        paths = invoke("config", "path").stdout.splitlines()
    assert paths[1] == str(root / "foliko.toml")


def test_the_search_stops_at_the_repository_root(invoke, places):
    outer = places["project"].parent
    (outer / "foliko.toml").write_text('model = "echo"\n')
    repo = outer / "repo"
    (repo / ".git").mkdir(parents=True)
    inside = repo / "sub"
    inside.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(inside)
        assert shown(invoke)["model"] == (None, "default")
        (repo / "foliko.toml").write_text('model = "echo"\n')
        assert shown(invoke)["model"] == ("echo", f"project {repo / 'foliko.toml'}")


def test_the_nearest_project_file_wins(invoke, places):
    root = places["project"].parent
    (root / "foliko.toml").write_text("max_steps = 3\n")
    sub = root / "sub"
    sub.mkdir()
    (sub / "foliko.toml").write_text("max_steps = 4\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(sub)
        assert shown(invoke)["max_steps"][0] == 4


def test_show_lists_the_model_and_agent_tables_with_secrets_redacted(invoke, places):
    """Was: [models.*] and [agents.*] were left out."""
    places["user"].write_text(
        '[models.fast]\nprovider = "openai"\nmodel = "gpt-x"\napi_key = "sk-secret"\n'
        'key_env = "MY_KEY"\n'
    )
    places["project"].write_text('[agents.helper]\nsystem_prompt = "Be kind."\ntools = ["a"]\n')
    trust(places["project"])
    rows = shown(invoke)
    user, project = f"user {places['user']}", f"project {places['project']}"
    assert rows["models.fast.provider"] == ("openai", user)
    assert rows["models.fast.model"] == ("gpt-x", user)
    assert rows["models.fast.api_key"] == ("***", user)
    assert rows["models.fast.key_env"] == ("MY_KEY", user)
    assert rows["agents.helper.system_prompt"] == ("Be kind.", project)
    assert rows["agents.helper.tools"] == (["a"], project)
    table = invoke("config", "show").stdout
    assert "sk-secret" not in table and "models.fast.api_key\t***" in table


def test_a_project_model_entry_overrides_the_user_one_in_show(invoke, places):
    places["user"].write_text('[models.m]\nmodel = "user-model"\n')
    places["project"].write_text('[models.m]\nmodel = "project-model"\n')
    assert shown(invoke)["models.m.model"] == ("project-model", f"project {places['project']}")


def test_foliko_home_does_not_move_the_user_config(invoke, places, tmp_path):
    places["user"].write_text("max_steps = 7\n")
    other_home = tmp_path / "elsewhere"
    rows = shown(invoke, env={"FOLIKO_HOME": str(other_home)})
    assert rows["max_steps"] == (7, f"user {places['user']}")
