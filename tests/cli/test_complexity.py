"""The chat command reads as a few steps: no function of cli/chat.py is above
cyclomatic complexity 15 (McCabe, as ruff's C901 and radon count it)."""

import subprocess
import sys
from pathlib import Path

CHAT = Path(__file__).resolve().parents[2] / "foliko_cli" / "cli" / "chat.py"


def test_no_function_of_the_chat_command_is_above_complexity_15():
    checked = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "C901"]
        + ["--config", "lint.mccabe.max-complexity = 15", str(CHAT)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout


def test_the_check_finds_a_complex_function(tmp_path):
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(16))
    tangled = tmp_path / "tangled.py"
    tangled.write_text(f"def f(x):\n{branches}\n    return -1\n")
    checked = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "C901"]
        + ["--config", "lint.mccabe.max-complexity = 15", str(tangled)],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 1 and "C901" in checked.stdout
