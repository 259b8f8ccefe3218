"""schemathesis against /openapi.json: no 5xx, every answer as documented.

A bounded run (fuzzing only, a few examples per operation) keeps the tier
fast on two cores; it still sends every operation malformed and valid input.
"""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import orjson

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance," + (
    "response_schema_conformance"
)


def test_schemathesis_finds_no_server_error_or_schema_violation(server, tmp_path):
    result = subprocess.run(
        [
            str(SCHEMATHESIS),
            "run",
            server.url + "/openapi.json",
            "--max-examples",
            "8",
            "--phases",
            "examples,fuzzing",
            "--checks",
            CHECKS,
            "--generation-deterministic",
            "--request-timeout",
            "30",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    spec = orjson.loads(urllib.request.urlopen(server.url + "/openapi.json").read())
    operations = sum(len(methods) for methods in spec["paths"].values())
    assert f"Tested: {operations}" in result.stdout, "every documented operation was run"
