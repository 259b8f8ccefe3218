"""Templates (issue 28, item 8): ``chat --save NAME`` keeps a command's prompt, system
prompt, model, options, parameters and schema as llm's YAML template, ``chat -t
NAME`` runs a turn from it (``$input`` the message, ``-p NAME VALUE`` its
parameters), and ``foliko templates list|show|edit|delete|path`` manage the files
under the config directory. llm 0.36 reads what foliko saves, and foliko what it
saves."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml
from trusting import trust

from .test_usage_errors import one_error_line

LLM = Path(sys.executable).with_name("llm")


@pytest.fixture
def templates(invoke) -> Path:
    """The templates directory (``templates/`` beside FOLIKO_CONFIG's file)."""
    return Path(os.environ["FOLIKO_CONFIG"]).parent / "templates"


def dry(invoke, *words: str, input: str | None = None) -> dict:
    result = invoke("chat", "-s", "s", "--dry-run", *words, input=input)
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def sent(shown: dict) -> str:
    return shown["messages"][-1]["content"]


def saved(invoke, *words: str, input: str | None = None) -> None:
    result = invoke("chat", "--save", *words, input=input)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""


# chat --save


def test_save_keeps_the_prompt_system_model_options_and_params_as_llm_writes_them(
    invoke, templates
):
    result = invoke(
        "chat",
        "--save",
        "review",
        "-m",
        "echo",
        "--system",
        "You review $lang code.",
        "-o",
        "temperature=0.2",
        "-o",
        'stop=["END"]',
        "-p",
        "lang",
        "Python",
        "Review this:\n$input",
    )

    assert result.exit_code == 0, result.stderr
    path = templates / "review.yaml"
    assert result.stderr == f"foliko: saved template 'review' ({path})\n"
    assert yaml.safe_load(path.read_text()) == {
        "model": "echo",
        "prompt": "Review this:\n$input",
        "system": "You review $lang code.",
        "defaults": {"lang": "Python"},
        "options": {"temperature": 0.2, "stop": ["END"]},
    }
    assert "prompt: |" in path.read_text(), "a prompt of several lines is a block, to edit"
    assert path.stat().st_mode & 0o777 == 0o600
    assert invoke("sessions", "list", "-q").stdout == "", "no turn ran"


def test_save_takes_the_prompt_from_stdin_and_replaces_a_template_of_that_name(invoke, templates):
    saved(invoke, "t", "first")
    result = invoke("chat", "--save", "t", input="from stdin\n")

    assert result.exit_code == 0, result.stderr
    assert "replaced template 't'" in result.stderr
    assert yaml.safe_load((templates / "t.yaml").read_text()) == {"prompt": "from stdin\n"}


def test_save_keeps_a_compact_schema_as_json_schema(invoke, templates):
    saved(invoke, "person", "--schema", "name, age int", "Who wrote Emma?")

    assert yaml.safe_load((templates / "person.yaml").read_text())["schema_object"] == {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    assert dry(invoke, "-t", "person")["schema"]["required"] == ["name", "age"]


def test_every_chat_option_is_either_kept_by_save_or_refused_with_it():
    from foliko_cli.cli.chat import chat
    from foliko_cli.cli.templates import NOT_SAVED

    kept = {"message", "no_stdin", "model", "system", "model_options", "params", "schema"}
    kept |= {"tools", "functions", "save", "extract"}
    assert {p.name for p in chat.params} - {"storage", "user"} == kept | set(NOT_SAVED)


@pytest.mark.parametrize(
    ("words", "fragments"),
    [
        (["-s", "s1"], ["-s/--session has no use there"]),
        (["--json", "--dry-run"], ["--json, --dry-run has no use"]),
        (["-a", "notes.md"], ["-a/--attach"]),
        (["-t", "other"], ["-t/--template"]),
        (["--var", "k=v"], ["--var "]),
    ],
)
def test_save_refuses_what_a_template_does_not_keep(invoke, templates, words, fragments):
    one_error_line(invoke("chat", "--save", "x", *words, "hi"), "--save NAME", *fragments)
    assert not templates.exists()


@pytest.mark.parametrize(
    ("words", "fragment"),
    [
        (["../x", "hi"], "'../x' cannot name a template"),
        (["x.yaml", "hi"], "'x.yaml' cannot name a template"),
        (["x", "-m", "nosuch:model", "hi"], "unknown model 'nosuch:model'"),
        (["x", "-o", "temperature=hot", "hi"], "model option temperature must be a number"),
        (["x", "--schema", "age integer", "hi"], "unknown type 'integer'"),
        (["x", "-T", "nosuch", "hi"], "unknown tool 'nosuch'"),
        (["x", "costs $5"], "template 'x': prompt has a '$' that starts no $name (line 1: "),
        (["x"], "--save NAME has nothing to keep"),
    ],
)
def test_save_checks_what_it_keeps(invoke, templates, words, fragment):
    one_error_line(invoke("chat", "-n", "--save", *words), fragment)
    assert not (templates / "x.yaml").exists()


# chat -t


def test_input_is_the_message_and_params_fill_the_rest(invoke):
    saved(invoke, "tr", "--system", "Answer in $lang.", "Translate: $input ($tone)")

    shown = dry(invoke, "-t", "tr", "-p", "lang", "French", "-p", "tone", "polite", "good night")

    assert sent(shown) == "Translate: good night (polite)"
    assert shown["system"] == "Answer in French."


def test_a_prompt_without_input_comes_first_and_the_message_follows(invoke):
    saved(invoke, "sum", "Summarise this:")

    assert sent(dry(invoke, "-t", "sum", "the long text")) == "Summarise this:\nthe long text"
    assert sent(dry(invoke, "-t", "sum", input="piped text")) == "Summarise this:\npiped text"
    assert sent(dry(invoke, "-n", "-t", "sum")) == "Summarise this:"


def test_a_template_without_a_prompt_leaves_the_message_as_it_is(invoke):
    saved(invoke, "terse", "--system", "Be terse.")

    shown = dry(invoke, "-t", "terse", "hello")

    assert sent(shown) == "hello"
    assert shown["system"] == "Be terse."


def test_the_flags_given_win_over_the_template(invoke):
    saved(invoke, "t", "-m", "openai:gpt-4o", "--system", "Template system.", "-o", "seed=1")
    saved(invoke, "o", "-o", "seed=1", "-o", "temperature=0.5", "hi")

    flags = dry(invoke, "-t", "t", "-m", "echo", "--system", "Mine.", "-o", "seed=2", "x")
    merged = dry(invoke, "-t", "o", "-o", "seed=9")

    assert (flags["model"], flags["system"], flags["options"]["seed"]) == ("echo", "Mine.", 2)
    assert merged["options"]["seed"] == 9 and merged["options"]["temperature"] == 0.5


def test_defaults_fill_parameters_not_passed(invoke):
    saved(invoke, "greet", "-p", "who", "world", "Hello $who")

    assert sent(dry(invoke, "-t", "greet")) == "Hello world"
    assert sent(dry(invoke, "-t", "greet", "-p", "who", "Ada")) == "Hello Ada"


def test_a_template_runs_a_real_turn_and_its_system_prompt_stays_with_the_session(invoke, show):
    saved(invoke, "t", "--system", "Kept.", "Say: $input")

    result = invoke("chat", "-s", "s1", "-t", "t", "hi")

    assert result.exit_code == 0, result.stderr
    assert result.stdout == "Say: hi\n"
    record = show("s1")
    assert record["messages"][0]["content"] == "Say: hi"
    assert record["metadata"]["system_prompt"] == "Kept."


def test_a_template_file_is_used_by_its_path(invoke, tmp_path):
    Path("local.yaml").write_text("prompt: 'From a file: $input'\n")
    Path("plain.yml").write_text("Just a prompt\n")

    assert sent(dry(invoke, "-t", "local.yaml", "x")) == "From a file: x"
    assert sent(dry(invoke, "-t", "./plain.yml", "y")) == "Just a prompt\ny"


@pytest.mark.parametrize(
    ("words", "fragments"),
    [
        (["-t", "nosuch", "hi"], ["no template named 'nosuch'", "(foliko templates list)"]),
        (["-t", "trn", "hi"], ["no template named 'trn' (did you mean 'tr'?)"]),
        (["-t", "tr", "hi"], ["template 'tr' (", "needs a value for $lang", "-p/--param"]),
        (["-t", "tr", "-p", "lang", "x", "-p", "mood", "y", "hi"], ["no parameter 'mood'"]),
        (["-t", "tr", "-p", "input", "x", "hi"], ["$input is the message, not a parameter"]),
        (["-t", "tr", "-p", "lang", "x"], ["puts the message in $input, and there is none"]),
        (["-p", "lang", "x", "hi"], ["-p/--param gives a template's $NAME a value"]),
        (["-t", "tr", "-p", "lang", "x", "--regenerate"], ["--regenerate sends the last"]),
        (["-t", "missing.yaml", "hi"], ["cannot read template file 'missing.yaml'"]),
    ],
)
def test_a_template_that_cannot_be_applied_is_one_line(invoke, words, fragments):
    saved(invoke, "tr", "Into $lang: $input")
    one_error_line(invoke("chat", "-n", "-s", "s", *words), *fragments)
    assert invoke("sessions", "list", "-q").stdout == ""


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("prompt: [unclosed\n", "not valid YAML (line 2"),
        ("- a list\n", "must be a mapping of model, prompt, system"),
        ("promt: hi\n", "unknown key 'promt' (did you mean 'prompt'?)"),
        ("prompt: hi\nfragments: [a]\n", "'fragments' is an llm template key foliko does not"),
        ("prompt: 3\n", "prompt must be text, not int"),
        ("options: [1]\n", "options must be a mapping"),
        ("defaults: {a: [1]}\n", "defaults: a must be text or a number"),
        ("schema_object: {type: 3}\n", "schema_object is not a valid JSON Schema"),
        ("system: costs $ 5\n", "system has a '$' that starts no $name (line 1: write $$"),
        ("model: ' '\n", "model is blank"),
    ],
)
def test_a_broken_template_file_is_one_line_naming_it_and_the_fix(
    invoke, templates, text, fragment
):
    templates.mkdir(parents=True)
    (templates / "bad.yaml").write_text(text)

    line = one_error_line(invoke("chat", "-s", "s", "-t", "bad", "hi"), fragment)
    assert f"({templates / 'bad.yaml'})" in line
    assert line.endswith("fix the file (foliko templates edit NAME)")
    one_error_line(invoke("templates", "show", "bad"), fragment)


# foliko templates


def test_list_show_and_delete(invoke, templates):
    saved(invoke, "b", "-m", "echo", "--system", "Sys", "Prompt $x")
    saved(invoke, "a", "Just a prompt")

    listed = invoke("templates", "list", "--json")
    shown = invoke("templates", "show", "b")
    as_json = invoke("templates", "show", "b", "--json")

    assert [r["name"] for r in orjson.loads(listed.stdout)] == ["a", "b"]
    assert invoke("templates", "list", "-q").stdout == "a\nb\n"
    assert invoke("templates", "list", "--no-header").stdout.splitlines() == [
        "a\t\t\tJust a prompt",
        "b\techo\tSys\tPrompt $x",
    ]
    assert shown.stdout == (templates / "b.yaml").read_text()
    assert orjson.loads(as_json.stdout) == {
        "name": "b",
        "model": "echo",
        "prompt": "Prompt $x",
        "system": "Sys",
        "parameters": ["x"],
        "path": str(templates / "b.yaml"),
    }
    deleted = invoke("templates", "delete", "a", "b")
    assert deleted.exit_code == 0, deleted.stderr
    assert deleted.stderr.splitlines() == [
        "foliko: deleted template 'a'",
        "foliko: deleted template 'b'",
    ]
    assert list(templates.iterdir()) == []
    assert invoke("templates", "list", "--json").stdout.strip() == "[]"


def test_list_names_a_broken_file_on_stderr_and_goes_on(invoke, templates):
    saved(invoke, "good", "hi")
    (templates / "bad.yaml").write_text("promt: x\n")

    result = invoke("templates", "list", "-q")

    assert result.exit_code == 0
    assert result.stdout == "good\n"
    assert result.stderr.startswith("foliko: skipped template 'bad' (")


def test_delete_of_a_missing_template_deletes_none(invoke, templates):
    saved(invoke, "keep", "hi")

    one_error_line(invoke("templates", "delete", "keep", "gone"), "no template named 'gone'")
    assert (templates / "keep.yaml").exists()


def test_path_is_the_templates_directory(invoke, templates):
    assert invoke("templates", "path").stdout == f"{templates}\n"


def editor(tmp_path: Path, body: str) -> str:
    """An $EDITOR: a script that runs ``body`` (Python) with the file's path as ``path``."""
    script = tmp_path / "editor.py"
    script.write_text(f"import sys\npath = sys.argv[1]\n{body}\n")
    return f"{sys.executable} {script}"


def test_edit_opens_the_editor_on_a_new_template_and_checks_it(invoke, templates, tmp_path):
    seen = tmp_path / "seen.txt"
    writes = (
        f"open({str(seen)!r}, 'w').write(open(path).read())\n"
        "open(path, 'w').write('prompt: Edited $input\\n')"
    )

    result = invoke("templates", "edit", "fresh", env={"EDITOR": editor(tmp_path, writes)})

    assert result.exit_code == 0, result.stderr
    assert seen.read_text() == "prompt: \n", "a new template starts as llm's does"
    assert "saved template 'fresh'" in result.stderr
    assert sent(dry(invoke, "-t", "fresh", "x")) == "Edited x"


def test_edit_that_leaves_a_new_template_as_it_was_keeps_nothing(invoke, templates, tmp_path):
    result = invoke("templates", "edit", "fresh", env={"EDITOR": editor(tmp_path, "pass")})

    assert result.exit_code == 0
    assert "left as it was; nothing saved" in result.stderr
    assert not (templates / "fresh.yaml").exists()


def test_edit_that_breaks_a_template_says_so_and_keeps_the_file(invoke, templates, tmp_path):
    saved(invoke, "t", "hi")
    breaks = "open(path, 'w').write('promt: oops\\n')"

    result = invoke("templates", "edit", "t", env={"EDITOR": editor(tmp_path, breaks)})

    one_error_line(result, "unknown key 'promt'", "foliko templates edit NAME")
    assert (templates / "t.yaml").read_text() == "promt: oops\n", "kept, to edit again"


def test_edit_with_an_editor_that_fails_is_one_line(invoke, tmp_path, templates):
    fails = editor(tmp_path, "sys.exit(1)")

    one_error_line(invoke("templates", "edit", "t", env={"EDITOR": fails}), "the editor failed")
    assert not (templates / "t.yaml").exists()


def test_edit_without_an_editor_off_a_terminal_is_one_line(invoke):
    result = invoke("templates", "edit", "t", env={"EDITOR": "", "VISUAL": ""})
    one_error_line(result, "no editor to open", "set EDITOR")


# llm reads foliko's templates, and foliko llm's


@pytest.fixture
def llm_env(tmp_path: Path) -> dict[str, str]:
    if not LLM.exists() and not shutil.which("llm"):
        pytest.skip("llm is not installed")
    home = tmp_path / "llm-home"
    home.mkdir()
    return {**os.environ, "LLM_USER_PATH": str(home)}


def run_llm(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    executable = str(LLM) if LLM.exists() else "llm"
    return subprocess.run([executable, *args], capture_output=True, text=True, env=env)


def test_a_template_llm_saved_runs_in_foliko(invoke, llm_env):
    made = run_llm(
        "--save", "pirate", "--system", "You are $role.", "-p", "role", "a pirate",
        "-o", "temperature", "0.5", "Greet $input", env=llm_env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    path = Path(llm_env["LLM_USER_PATH"]) / "templates" / "pirate.yaml"

    shown = dry(invoke, "-t", str(path), "Ada")

    assert sent(shown) == "Greet Ada"
    assert shown["system"] == "You are a pirate."
    assert shown["options"]["temperature"] == 0.5


def test_llm_reads_a_template_foliko_saved(invoke, templates, llm_env):
    saved(invoke, "sum", "--system", "Be brief.", "-p", "lang", "English", "In $lang: $input")
    llm_env["LLM_USER_PATH"] = str(templates.parent)

    listed = run_llm("templates", "list", env=llm_env)
    shown = run_llm("templates", "show", "sum", env=llm_env)

    assert listed.stdout.strip() == "sum : system: Be brief. prompt: In $lang: $input"
    assert yaml.safe_load(shown.stdout) == {
        "name": "sum",
        "prompt": "In $lang: $input",
        "system": "Be brief.",
        "defaults": {"lang": "English"},
    }


def test_the_real_process_runs_a_template(run_foliko):
    made = run_foliko("chat", "--save", "t", "Tell me about $input", input=b"")
    assert made.returncode == 0, made.stderr

    result = run_foliko("chat", "-s", "p", "-t", "t", input=b"otters")

    assert result.returncode == 0, result.stderr
    assert result.stdout == b"Tell me about otters\n"


def test_what_a_template_holds_reaches_the_model_server(run_foliko, tmp_path):
    from models.fake_servers import OPENAI_KEY, FakeServer, openai_message

    Path("trip.py").write_text("def forecast(city: str) -> str:\n    return 'sun'\n")
    Path("trip.yaml").write_text(
        "model: openai:some-model\nsystem: Be $mood.\nprompt: 'Plan: $input'\n"
        "defaults: {mood: calm}\noptions: {temperature: 0.3, seed: 5}\n"
        "schema_object: {type: object, properties: {city: {type: string}}}\n"
        "functions: trip.py\n"
    )
    trust(Path("trip.yaml"))
    server = FakeServer().start()
    try:
        server.queue(openai_message('{"city": "Lyon"}'))
        env = {"OPENAI_BASE_URL": f"{server.url}/v1", "OPENAI_API_KEY": OPENAI_KEY}
        result = run_foliko("chat", "-s", "s", "-t", "trip.yaml", "-o", "seed=6", "Lyon", env=env)
    finally:
        server.stop()

    assert result.returncode == 0, result.stderr
    (request,) = server.requests
    body = request.body
    assert body["model"] == "some-model"
    assert body["messages"][0] == {"role": "system", "content": "Be calm."}
    assert body["messages"][-1] == {"role": "user", "content": "Plan: Lyon"}
    assert (body["temperature"], body["seed"]) == (0.3, 6)
    assert body["response_format"]["json_schema"]["schema"]["properties"] == {
        "city": {"type": "string"}
    }
    assert "forecast" in {tool["function"]["name"] for tool in body["tools"]}
