"""An MCP server's log notifications, on the logger ``foliko.mcp.SERVER``.

Each ``notifications/message`` becomes one record at the Python level of
its syslog level. foliko asks a server for messages from the level that
logger lets through (a 2026-07-28 server sends none unless asked), so a
process that configures nothing gets warnings and worse. A ``NullHandler``
on ``foliko.mcp`` keeps them off stderr unless the application configures
logging: the messages are the server's, not foliko's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import orjson

from foliko_cli.common.redaction import remembered, scrub

if TYPE_CHECKING:
    import logging

LOGGER = "foliko.mcp"
# logging's levels (DEBUG 10 ... CRITICAL 50), by number: logging is imported
# only when a server logs (start-up time, P1)
DEBUG, INFO, NOTICE, WARNING, ERROR, CRITICAL = 10, 20, 25, 30, 40, 50

_LEVELS = {
    "debug": DEBUG,
    "info": INFO,
    "notice": NOTICE,
    "warning": WARNING,
    "error": ERROR,
    "critical": CRITICAL,
    "alert": CRITICAL,
    "emergency": CRITICAL,
}
Level = Literal["debug", "info", "notice", "warning", "error", "critical"]

_ASKED: tuple[tuple[int, Level], ...] = (
    (DEBUG, "debug"),
    (INFO, "info"),
    (NOTICE, "notice"),
    (WARNING, "warning"),
    (ERROR, "error"),
)


def server_logger(server: str) -> logging.Logger:
    import logging

    parent = logging.getLogger(LOGGER)
    if not any(isinstance(h, logging.NullHandler) for h in parent.handlers):
        parent.addHandler(logging.NullHandler())
    logger = parent.getChild(server)
    filter_secrets(logger.name)
    return logger


def log_level(server: str) -> Level:
    """The MCP level to ask ``server`` for: the lowest its logger records."""
    effective = server_logger(server).getEffectiveLevel()
    for level, name in _ASKED:
        if effective <= level:
            return name
    return "critical"


def log_notification(server: str, params: Any) -> None:
    """Record one ``notifications/message`` (``LoggingMessageNotificationParams``)."""
    data = params.data
    text = data if isinstance(data, str) else orjson.dumps(data, default=str).decode()
    name = getattr(params, "logger", None)
    logger = server_logger(server)
    level = _LEVELS.get(str(params.level), INFO)
    logger.log(level, f"{name}: {text}" if name else text)


class SecretFilter:
    """Hides the remembered secrets in a record's message and traceback (a
    logging filter need not subclass ``logging.Filter``: logging is imported
    only when a server logs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        import logging

        if not remembered():
            return True
        record.msg, record.args = scrub(record.getMessage()), None
        if record.exc_info:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, scrub(formatted)
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True


def filter_secrets(prefix: str) -> None:
    """Put a ``SecretFilter`` on the logger ``prefix`` and every one below it that
    exists (a logger's filters see only its own records)."""
    import logging

    loggers = [logging.getLogger(prefix)] + [
        logger
        for name, logger in list(logging.Logger.manager.loggerDict.items())
        if name.startswith(prefix + ".") and isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        if not any(isinstance(f, SecretFilter) for f in logger.filters):
            logger.addFilter(SecretFilter())
