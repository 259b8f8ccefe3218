"""The chat command reads as a few steps: no function of cli/chat.py is above
cyclomatic complexity 15 (McCabe, as ruff's C901 and radon count it)."""

import subprocess
import sys
from pathlib import Path

CHAT = Path(__file__).resolve().parents[2] / "foliko_cli" / "cli" / "chat.py"
C901 = ["--isolated", "--select", "C901", "--config", "lint.mccabe.max-complexity = 15"]


def complexity(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", "check", *C901, str(path)], capture_output=True, text=True
    )


def test_no_function_of_the_chat_command_is_above_complexity_15():
    checked = complexity(CHAT)
    assert checked.returncode == 0, checked.stdout


def test_the_check_finds_a_complex_function(tmp_path):
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(16))
    tangled = tmp_path / "tangled.py"
    tangled.write_text(f"def f(x):\n{branches}\n    return -1\n")
    checked = complexity(tangled)
    assert checked.returncode == 1 and "C901" in checked.stdout
