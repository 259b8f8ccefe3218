"""Secrets hidden in every form a server may echo them in (raw, URL-encoded,
JSON-escaped, HTTP Basic), in errors and in the MCP loggers' records."""

from __future__ import annotations

import base64
import json
import logging
from urllib.parse import quote, quote_plus

from foliko_cli.common.redaction import basic_credentials, remember_secrets, scrub
from foliko_cli.mcp.logs import filter_secrets

SECRET = "s3cr+t/é&=x"


def test_every_form_of_a_secret_is_hidden():
    basic = base64.b64encode(f"robot:{quote(SECRET, safe='')}".encode()).decode()
    plain_basic = base64.b64encode(f"robot:{SECRET}".encode()).decode()
    forms = [SECRET, quote(SECRET, safe=""), quote_plus(SECRET), json.dumps(SECRET)[1:-1]]
    text = " | ".join([*forms, basic, f"Basic {plain_basic.rstrip('=')}"])
    hidden = scrub(text, (SECRET, *basic_credentials("robot", SECRET)))
    assert hidden == " | ".join(["***"] * 5 + ["Basic ***"])


def test_the_mcp_sdks_log_records_hide_remembered_secrets(caplog):
    remember_secrets(["at-remembered-token"])
    logger = logging.getLogger("mcp.client.auth.test_only")
    filter_secrets("mcp")
    with caplog.at_level(logging.WARNING, logger="mcp"):
        try:
            raise RuntimeError("refresh failed: refresh_token=at-remembered-token")
        except RuntimeError:
            logger.exception("token %s failed", "at-remembered-token")
    [record] = caplog.records
    assert "at-remembered-token" not in record.getMessage()
    assert "at-remembered-token" not in (record.exc_text or "")
    assert "***" in record.getMessage()
