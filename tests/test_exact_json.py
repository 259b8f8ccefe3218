"""messages/exact_json.py ``copied``: what ``copy.deepcopy`` returns for JSON,
sharing nothing mutable with the original."""

from __future__ import annotations

import copy
import math

from foliko_cli.messages.exact_json import copied


def test_a_json_value_is_copied_as_deepcopy_would_and_shares_no_object_or_array():
    value = {
        "messages": [{"role": "user", "content": "hi", "n": 2**63, "x": -0.0, "ok": True}],
        "nested": {"list": [[1, 2.5, None], {"deep": ["\ud800"]}]},
    }
    copy_ = copied(value)
    assert copy_ == copy.deepcopy(value)
    copy_["messages"][0]["content"] = "changed"
    copy_["nested"]["list"][0].append(3)
    copy_["nested"]["list"][1]["deep"].clear()
    assert value["messages"][0]["content"] == "hi"
    assert value["nested"]["list"] == [[1, 2.5, None], {"deep": ["\ud800"]}]


def test_a_number_json_cannot_hold_is_kept_as_it_is():
    copy_ = copied({"nan": math.nan, "inf": -math.inf})
    assert math.isnan(copy_["nan"]) and copy_["inf"] == -math.inf


def test_anything_else_is_deep_copied():
    inner = {"a": [1]}
    value = [{1, 2}, (inner,)]
    copy_ = copied(value)
    assert copy_ == value
    assert copy_[0] is not value[0]
    assert copy_[1][0] is not inner
