"""`foliko completion SHELL`: the committed scripts are current, and each one loads
and completes in the real shell (subcommands, and session ids from storage)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPLETIONS = ROOT / "completions"
SCRIPTS = {"bash": "foliko.bash", "zsh": "_foliko", "fish": "foliko.fish"}
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("shell", sorted(SCRIPTS))
def test_committed_script_is_current(invoke, shell):
    result = invoke("completion", shell)
    assert result.exit_code == 0
    committed = (COMPLETIONS / SCRIPTS[shell]).read_text()
    assert result.stdout == committed, (
        f"completions/{SCRIPTS[shell]} is stale: run 'make completions' and commit the result"
    )


@pytest.mark.parametrize("args", [["powershell"], [], ["bash", "zsh"]])
def test_unknown_or_missing_shell_exits_2(invoke, args):
    result = invoke("completion", *args)
    assert result.exit_code == 2
    assert result.stdout == ""


def test_completion_help_has_an_example(invoke):
    result = invoke("completion", "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout


# the real shells


@pytest.fixture
def shell_env(foliko_home, tmp_path, invoke):
    """Sessions a1, a2, b1 (sqlite) and j1 (json); the installed foliko first on PATH."""
    for sid in ("a1", "a2", "b1"):
        assert invoke("chat", "-s", sid, "x", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    assert invoke("--storage", "json", "chat", "-s", "j1", "x").exit_code == 0
    assert (BIN / "foliko").exists(), "the foliko console script is not installed"
    home = tmp_path / "shell-home"
    home.mkdir()
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "FOLIKO_HOME": str(foliko_home),
        "TERM": "dumb",
    }


def need(shell: str) -> str:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed (the CI installs it from the distribution)")
    return path


def run_shell(argv: list[str], script: str, env: dict) -> list[str]:
    result = subprocess.run(
        [*argv, script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    return result.stdout.splitlines()


BASH = """
source completions/foliko.bash
complete -p foliko
complete_words() {
    COMPREPLY=()
    COMP_WORDS=("$@")
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
    _foliko_completion foliko
    printf '%s\\n' "${COMPREPLY[@]}"
    echo SEP
}
complete_words foliko ses
complete_words foliko sessions show a
complete_words foliko chat -s x --from ''
complete_words foliko --storage json sessions show ''
complete_words foliko sessions del
"""


def test_bash_script_loads_and_completes(shell_env):
    bash = need("bash")
    lines = run_shell([bash, "--norc", "--noprofile", "-c"], BASH, shell_env)
    assert lines[0] == "complete -o nosort -F _foliko_completion foliko"
    groups = "\n".join(lines[1:]).split("SEP")
    assert groups[0].split() == ["sessions"]
    assert groups[1].split() == ["a1", "a2"]
    assert groups[2].split() == ["a1", "a2", "b1"]
    assert groups[3].split() == ["j1"]
    assert groups[4].split() == ["delete"]


ZSH = """
autoload -U compinit
compinit -u -d "$HOME/.zcompdump"
source completions/_foliko
print -r -- "registered: $_comps[foliko]"
# outside a completion widget zsh refuses compadd/_describe; record what they get
compadd() { local name=${@[-1]}; print -rl -- "${(@P)name}"; }
_describe() {
    local name=$3; local -a items; items=("${(@P)name}")
    print -rl -- "${items[@]%%:*}"
}
complete_words() { words=("$@"); CURRENT=$#; _foliko_completion; print -r -- SEP; }
complete_words foliko ses
complete_words foliko sessions show a
complete_words foliko chat -s x --from ''
complete_words foliko --storage json sessions show ''
"""


def test_zsh_script_loads_and_completes(shell_env):
    zsh = need("zsh")
    lines = run_shell([zsh, "-f", "-c"], ZSH, shell_env)
    assert lines[0] == "registered: _foliko_completion"
    groups = "\n".join(lines[1:]).split("SEP")
    assert groups[0].split() == ["sessions"]
    assert groups[1].split() == ["a1", "a2"]
    assert groups[2].split() == ["a1", "a2", "b1"]
    assert groups[3].split() == ["j1"]


FISH = """
source completions/foliko.fish
complete -C 'foliko ses'
echo SEP
complete -C 'foliko sessions show a'
echo SEP
complete -C 'foliko chat -s x --from '
echo SEP
complete -C 'foliko --storage json sessions show '
echo SEP
"""


def test_fish_script_loads_and_completes(shell_env):
    fish = need("fish")
    lines = run_shell([fish, "--no-config", "-c"], FISH, shell_env)
    groups = "\n".join(lines).split("SEP")
    assert [line.split("\t")[0] for line in groups[0].split("\n") if line] == ["sessions"]
    assert groups[1].split() == ["a1", "a2"]
    assert groups[2].split() == ["a1", "a2", "b1"]
    assert groups[3].split() == ["j1"]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_tab_completes_in_an_interactive_shell(shell_env, shell):
    """The scripts as a user meets them: TAB pressed at a real interactive prompt."""
    pexpect = pytest.importorskip("pexpect")
    path = need(shell)
    if shell == "bash":
        argv, setup = ["--norc", "--noprofile", "-i"], "source completions/foliko.bash"
    else:
        argv = ["-f", "-i"]
        setup = 'autoload -U compinit; compinit -u -d "$HOME/.zcd"; source completions/_foliko'
    child = pexpect.spawn(
        path, argv, env=shell_env, cwd=str(ROOT), encoding="utf-8", timeout=20,
        dimensions=(24, 200),
    )  # fmt: skip
    try:
        # quoted so that the echo of this line does not look like the prompt
        child.sendline(f"PS1='RE''ADY> '; PROMPT=$PS1; {setup}")
        child.expect_exact("READY> ")
        child.send("foliko ses\t")
        child.expect_exact("foliko sessions ")
        child.sendcontrol("u")
        child.sendline("echo 'do''ne'")
        child.expect_exact("done")
        child.expect_exact("READY> ")
        child.send("foliko sessions show a\t\t")
        child.expect(r"a1\s+a2")
        assert "b1" not in child.after
    finally:
        child.close(force=True)


def test_completion_protocol_is_silent_when_storage_is_broken(run_foliko):
    result = run_foliko(
        env={
            "_FOLIKO_COMPLETE": "bash_complete",
            "COMP_WORDS": "foliko --storage bogus sessions show a",
            "COMP_CWORD": "5",
        }
    )
    assert result.returncode == 0
    assert result.stdout.strip() == b""
    assert b"Traceback" not in result.stderr


def _interactive_shell(shell: str, env: dict):
    pexpect = pytest.importorskip("pexpect")
    path = need(shell)
    if shell == "bash":
        argv = ["--norc", "--noprofile", "-i"]
        setup = "PS1='RE''ADY> '; source completions/foliko.bash"
    elif shell == "zsh":
        argv = ["-f", "-i"]
        setup = (
            "PS1='RE''ADY> '; PROMPT=$PS1; autoload -U compinit; "
            'compinit -u -d "$HOME/.zcd"; source completions/_foliko'
        )
    else:
        argv = ["--no-config", "-i"]
        setup = "function fish_prompt; echo -n 'RE''ADY> '; end; source completions/foliko.fish"
    child = pexpect.spawn(
        path, argv, env=env, cwd=str(ROOT), encoding="utf-8", timeout=20, dimensions=(24, 200)
    )
    child.sendline(setup)
    child.expect_exact("READY> ")
    return child


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
@pytest.mark.parametrize(
    ("sid", "typed"), [("with space", "wit"), ("comma,in it", "comm"), ("it's $HOME", "it")]
)
def test_an_id_with_spaces_or_quotes_is_completed_as_one_word(shell_env, invoke, shell, sid, typed):
    """Was: bash inserted `with space` unescaped (two words); fish cut `comma,in it` at
    the comma."""
    for name in (sid, "wonder", "custom"):
        assert invoke("chat", "-s", name, "x", env={"FOLIKO_MODEL": "echo"}).exit_code == 0
    child = _interactive_shell(shell, shell_env)
    try:
        child.send(f"foliko sessions show {typed}\t")
        child.expect_exact(sid.split()[-1][-2:])
        # the completed line's words, one per <...>: run printf on them instead of foliko
        child.sendcontrol("a")
        child.send("printf '<%s>\\n' ")
        child.send("\r")
        child.expect(r"<foliko>\s+<sessions>\s+<show>\s+<([^>]*)>")
        assert child.match.group(1) == sid
    finally:
        child.close(force=True)
