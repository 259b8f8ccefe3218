"""Every error foliko reports, each with the exit code it maps to (SPEC §4).

A message names the problem and, in words a library user can act on, the
fix. Where the fix is a setting, the error also carries a ``hint`` (one of
the ``Hint`` names): the CLI replaces the generic fix by the flag that
sets it, so the core never speaks in CLI flags.
"""


class ExitCode:
    """The documented exit codes (plain ints: an enum class costs start-up time)."""

    OK = 0
    MODEL = 1
    USAGE = 2
    STORAGE = 3
    BUSY = 4
    INTERRUPTED = 130
    TERMINATED = 143


class Hint:
    """Settings a fix may name; the CLI maps each to its flag."""

    TIMEOUT = "timeout"
    STORAGE = "storage"
    MODEL = "model"
    SESSIONS = "sessions"
    TOOLS = "tools"
    RESUME = "resume"
    VARIABLE = "variable"
    VALIDATE = "validate"
    TRASH = "trash"
    REPAIR = "repair"
    FORMAT = "format"
    PARAMETER = "parameter"
    TEMPLATES = "templates"
    EDIT_TEMPLATE = "edit_template"
    KEEP = "keep"


class FolikoError(Exception):
    """Base of all foliko errors.

    ``problem`` is the message without the fix; ``fix`` the generic advice;
    ``hint`` the setting the fix is about, when there is one.
    """

    exit_code: int = ExitCode.MODEL
    hint: str | None = None

    def __init__(self, message: str = "", *, fix: str | None = None, hint: str | None = None):
        self.problem = message
        self.fix = fix
        if hint is not None:
            self.hint = hint
        super().__init__(f"{message}; {fix}" if fix else message)


class UsageError(FolikoError):
    """Bad input from the user: an option, an id, a message, a URL."""

    exit_code = ExitCode.USAGE


class InvalidSessionIdError(UsageError):
    pass


class SessionNotFoundError(UsageError):
    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} not found",
            fix="list the sessions that exist",
            hint=Hint.SESSIONS,
        )


class NotInTrashError(UsageError):
    def __init__(self, name: str, *, gone: bool = False):
        self.name = name
        what = "is no longer in the trash (restored or emptied meanwhile)"
        if not gone:
            what = "is not in the trash"
        super().__init__(f"{name!r} {what}", fix="list what the trash holds", hint=Hint.TRASH)


class ImagesRefusedError(UsageError):
    """A model server that says it cannot take the images attached to a turn."""


class NothingToCompactError(UsageError):
    """A compaction asked for when no message is left to fold into the summary."""

    def __init__(self, session_id: str, why: str):
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} has nothing to compact: {why}",
            fix="keep fewer of its last turns verbatim",
            hint=Hint.KEEP,
        )


class StorageConfigError(UsageError):
    """An unknown backend name or a malformed storage URL."""


class StorageError(FolikoError):
    exit_code = ExitCode.STORAGE


class ServeStartError(FolikoError):
    """``foliko serve`` cannot listen where it was asked to (a port in use)."""

    exit_code = ExitCode.STORAGE


class CorruptSessionError(StorageError):
    """A stored session that is damaged: it cannot be parsed, or what is stored does
    not add up (storage/integrity.py). Every read raises it and nothing writes to
    the session until a repair moves it aside or it is deleted."""

    def __init__(self, session_id: str, where: str, reason: str):
        self.session_id = session_id
        self.where = where
        self.reason = reason
        super().__init__(
            f"session {session_id!r} is damaged ({reason}) in {where}; nothing was written to it",
            fix="move it aside with a storage repair (which deletes nothing) or delete it",
            hint=Hint.REPAIR,
        )


class SessionBusyError(FolikoError):
    exit_code = ExitCode.BUSY

    def __init__(self, session_id: str, waited: float, holder: str | None):
        self.session_id = session_id
        self.holder = holder
        who = f" by {holder}" if holder else ""
        super().__init__(
            f"session {session_id!r} is busy: held{who} for more than {waited:g}s",
            fix="retry later or allow a longer timeout",
            hint=Hint.TIMEOUT,
        )


class ModelError(FolikoError):
    """The model provider failed or was misconfigured."""

    exit_code = ExitCode.MODEL


class MCPServerError(FolikoError):
    """An MCP server that was asked for by name could not be started."""

    exit_code = ExitCode.MODEL


class MCPLoginError(UsageError):
    """An MCP server that needs the user to log in (OAuth) before it can be used.

    It stops the turn even when raised by a tool: only the user can fix it."""


class UnknownModelError(UsageError):
    pass


class TurnTimeoutError(ModelError):
    def __init__(self, timeout: float):
        self.timeout = timeout
        super().__init__(
            f"the turn did not finish within {timeout:g}s and was not saved",
            fix="allow a longer timeout",
            hint=Hint.TIMEOUT,
        )


class ToolError(Exception):
    """Raised by a tool to report a failure to the model as a tool result."""


class AgentNotFoundError(UsageError):
    def __init__(self, agent_id: str):
        self.agent_id = agent_id
        super().__init__(
            f"agent {agent_id!r} not found", fix="create it with get_or_create_agent_context"
        )


class Interrupted(FolikoError):
    """SIGINT or SIGTERM stopped an operation; ``message`` says what was kept."""

    exit_code = ExitCode.INTERRUPTED

    def __init__(self, message: str, *, signal_number: int = 2):
        self.signal_number = signal_number
        if signal_number == 15:
            self.exit_code = ExitCode.TERMINATED
        super().__init__(message)


class ModelRejectedError(ModelError):
    """The provider refused the request with a status no retry changes (``status``)."""

    def __init__(self, message: str, status: int):
        self.status = status
        super().__init__(message)


class ContextOverflowError(ModelError):
    """The prompt does not fit the model's context window; ``window`` when the server said."""

    def __init__(self, message: str, window: int | None = None):
        self.window = window
        super().__init__(message)


class InvalidReplyError(ModelError):
    """The reply does not follow the JSON Schema the turn asked for."""
