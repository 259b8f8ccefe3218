"""Every error foliko reports, each with the exit code it maps to (SPEC §4).

Messages name the problem and the fix in one line; the CLI prints them as
they are and exits with ``exit_code``.
"""


class ExitCode:
    """The documented exit codes (plain ints: an enum class costs start-up time)."""

    OK = 0
    MODEL = 1
    USAGE = 2
    STORAGE = 3
    BUSY = 4
    INTERRUPTED = 130


class FolikoError(Exception):
    """Base of all foliko errors."""

    exit_code: int = ExitCode.MODEL


class UsageError(FolikoError):
    """Bad input from the user: an option, an id, a message, a URL."""

    exit_code = ExitCode.USAGE


class InvalidSessionIdError(UsageError):
    pass


class SessionNotFoundError(UsageError):
    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} not found; list sessions with 'foliko sessions list'"
        )


class StorageConfigError(UsageError):
    """An unknown backend name or a malformed storage URL."""


class StorageError(FolikoError):
    exit_code = ExitCode.STORAGE


class CorruptSessionError(StorageError):
    """A stored session that cannot be parsed; it is reported, never overwritten."""

    def __init__(self, session_id: str, where: str, reason: str):
        self.session_id = session_id
        self.where = where
        self.reason = reason
        super().__init__(
            f"session {session_id!r} is corrupt ({reason}) in {where}; it was left untouched: "
            "restore it from a backup or delete it with 'foliko sessions delete'"
        )


class SessionBusyError(FolikoError):
    exit_code = ExitCode.BUSY

    def __init__(self, session_id: str, waited: float, holder: str | None):
        self.session_id = session_id
        self.holder = holder
        who = f" by {holder}" if holder else ""
        super().__init__(
            f"session {session_id!r} is busy: held{who} for more than {waited:g}s; "
            "retry later or raise --timeout"
        )


class ModelError(FolikoError):
    """The model provider failed or was misconfigured."""

    exit_code = ExitCode.MODEL


class UnknownModelError(UsageError):
    pass


class TurnTimeoutError(ModelError):
    def __init__(self, timeout: float):
        self.timeout = timeout
        super().__init__(
            f"the turn did not finish within {timeout:g}s and was not saved; "
            "raise the limit with --timeout"
        )


class ToolError(Exception):
    """Raised by a tool to report a failure to the model as a tool result."""


class AgentNotFoundError(UsageError):
    def __init__(self, agent_id: str):
        self.agent_id = agent_id
        super().__init__(
            f"agent {agent_id!r} not found; create it with get_or_create_agent_context"
        )


class ContextOverflowError(ModelError):
    """The prompt does not fit the model's context window; ``window`` when the server said."""

    def __init__(self, message: str, window: int | None = None):
        self.window = window
        super().__init__(message)


class InvalidReplyError(ModelError):
    """The reply does not follow the JSON Schema the turn asked for."""
