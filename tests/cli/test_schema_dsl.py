"""``--schema`` takes llm's compact syntax too (issue 28, item 8): ``'name, age int,
bio: short bio'`` is the JSON Schema llm 0.36's ``schema_dsl`` builds from it."""

from __future__ import annotations

import orjson
import pytest

from .test_usage_errors import one_error_line

llm_utils = pytest.importorskip("llm.utils")

SAME_AS_LLM = [
    "name, age int, bio: short bio",
    "name str, height float, alive bool",
    "title: the title, with no comma\nyear int: when it came out, roughly\n",
    "name,",
    "  spaced  ,  padded int : with a description  ",
]


def shown_schema(invoke, schema: str) -> dict:
    result = invoke("chat", "-s", "s", "--dry-run", "--schema", schema, "hi")
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)["schema"]


@pytest.mark.parametrize("text", SAME_AS_LLM)
def test_the_compact_syntax_gives_the_schema_llm_gives(invoke, text):
    assert shown_schema(invoke, text) == llm_utils.schema_dsl(text)


def test_a_file_is_still_a_file_even_with_a_space_in_its_name(invoke, tmp_path):
    (tmp_path / "my schema.json").write_text('{"type": "object", "required": ["x"]}')
    assert shown_schema(invoke, "my schema.json") == {"type": "object", "required": ["x"]}


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("name, age integer", ["field 'age' has the unknown type 'integer'", "int, float"]),
        ("a short bio", ["field 'a' has the unknown type 'short bio'", "':' before"]),
        ("name, : no name", ["field ': no name' has no name before ':'"]),
        ("name, age int, name", ["names the field 'name' twice"]),
        (" , ", ["names no field"]),
        ("person", ["cannot read schema file 'person'", "fields such as 'name, age int'"]),
    ],
)
def test_a_bad_compact_schema_is_one_line(invoke, text, fragments):
    one_error_line(invoke("chat", "-s", "s", "--schema", text, "hi"), *fragments)
