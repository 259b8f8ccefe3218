"""Commands say only what is true: a typo'd source is not an empty one."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("kind", ["sqlite", "json"])
def test_migrating_from_a_store_that_does_not_exist_exits_2_and_creates_nothing(
    invoke, tmp_path, kind
):
    missing = tmp_path / "typo"
    result = invoke("storage", "migrate", f"{kind}:///{missing}", f"json:///{tmp_path / 'out'}")
    assert result.exit_code == 2
    assert "does not exist" in result.stderr and str(missing) in result.stderr
    assert not missing.exists()
    assert not (tmp_path / "out").exists()


def test_migrating_from_an_empty_store_that_exists_is_fine(invoke, tmp_path):
    (tmp_path / "empty").mkdir()
    result = invoke("storage", "migrate", f"json:///{tmp_path / 'empty'}", "sqlite")
    assert result.exit_code == 0, result.stderr
    assert "0 of 0" in result.stdout
