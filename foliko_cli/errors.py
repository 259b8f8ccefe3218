"""Every error foliko reports, each with the exit code it maps to (SPEC §4) and
the HTTP status and error code ``foliko serve`` answers it with.

A message names the problem and, in words a library user can act on, the
fix. Where the fix is a setting, the error also carries a ``hint`` (one of
the ``Hint`` names): the CLI replaces the generic fix by the flag that
sets it, so the core never speaks in CLI flags.
"""

from typing import Any


class ExitCode:
    """The documented exit codes (plain ints: an enum class costs start-up time)."""

    OK = 0
    MODEL = 1
    USAGE = 2
    STORAGE = 3
    BUSY = 4
    SUPERSEDED = 5
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
    NO_TRASH = "no_trash"
    INIT = "init"
    KEYS = "keys"
    FRAGMENTS = "fragments"
    IF_BUSY = "if_busy"


class FolikoError(Exception):
    """Base of all foliko errors.

    ``problem`` is the message without the fix; ``fix`` the generic advice;
    ``hint`` the setting the fix is about, when there is one.
    """

    exit_code: int = ExitCode.MODEL
    hint: str | None = None
    http_status: int = 500
    code: str = "internal_error"
    retryable: bool = False
    """Whether sending the same request again may succeed (serve tells the
    OpenAI SDKs not to retry when it cannot)."""

    def __init__(self, message: str = "", *, fix: str | None = None, hint: str | None = None):
        self.problem = message
        self.fix = fix
        if hint is not None:
            self.hint = hint
        super().__init__(f"{message}; {fix}" if fix else message)


class UsageError(FolikoError):
    """Bad input from the user: an option, an id, a message, a URL."""

    exit_code = ExitCode.USAGE
    http_status = 400
    code = "invalid_request"


class InvalidSessionIdError(UsageError):
    code = "invalid_session_id"


class SessionNotFoundError(UsageError):
    http_status = 404
    code = "not_found"

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} not found",
            fix="list the sessions that exist",
            hint=Hint.SESSIONS,
        )


class NotInTrashError(UsageError):
    http_status = 404
    code = "not_found"

    def __init__(self, name: str, *, gone: bool = False):
        self.name = name
        what = "is no longer in the trash (restored or emptied meanwhile)"
        if not gone:
            what = "is not in the trash"
        super().__init__(f"{name!r} {what}", fix="list what the trash holds", hint=Hint.TRASH)


class ScopeError(UsageError):
    """A change asked of a client whose scope only lets it read (HTTP 403)."""

    http_status = 403
    code = "insufficient_scope"

    def __init__(self, needed: str = "write"):
        self.needed = needed
        super().__init__(
            f"this client's scope is 'read': it may not change sessions (this needs '{needed}')",
            fix="use an API key (or a server) whose scope is 'write'",
        )


class ImagesRefusedError(UsageError):
    """A model server that says it cannot take the images attached to a turn."""


class VariableNotSetError(UsageError):
    """A session variable asked for (or to unset) that the session does not hold."""

    http_status = 404
    code = "variable_not_found"


class SessionExistsError(UsageError):
    http_status = 409
    code = "session_exists"

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"session {session_id!r} already exists; choose another name or delete it first"
        )


class InvalidRecordError(UsageError):
    """A record given to ``save`` that does not have the canonical shape."""

    def __init__(self, session_id: str, reason: str):
        self.session_id = session_id
        self.reason = reason
        super().__init__(
            f"cannot store session {session_id!r}: {reason}; nothing was saved: fix the data"
        )


class AttachmentError(UsageError):
    """An attachment that cannot be read or is of a kind foliko cannot send."""


class FragmentError(UsageError):
    """A fragment that cannot be found or read, or is not text foliko can send (exit 2)."""


class FragmentFetchError(FolikoError):
    """A fragment's URL could not be fetched: the network or the server failed (exit 1)."""

    exit_code = ExitCode.MODEL
    http_status = 502
    code = "fragment_fetch_failed"
    retryable = True


class WorkflowError(UsageError):
    """The workflow file is unreadable or invalid (exit 2)."""


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


class StoreNotFoundError(StorageConfigError):
    """A storage location the user named that is not there: a database or directory
    in a directory that does not exist, or (listing, from the command line) a
    database that does not exist. A mistyped path must not look like a store
    without sessions, nor be created silently."""

    http_status = 404
    code = "store_not_found"


class StorageError(FolikoError):
    exit_code = ExitCode.STORAGE
    http_status = 503
    code = "storage_error"
    retryable = True


class TrashFullError(StorageError):
    """A session could not be moved into the trash because the storage is full:
    nothing of it was removed. Deleting it without a copy frees the space."""

    def __init__(self, session_id: str, done: list[str], cause: StorageError):
        before = f"deleted {', '.join(map(repr, done))}; " if done else ""
        super().__init__(
            f"{before}session {session_id!r} was not deleted: the trash could not be "
            f"written, the storage is full ({cause.problem})",
            fix="to free space, delete it without keeping a copy in the trash",
            hint=Hint.NO_TRASH,
        )
        self.session_id = session_id
        self.done = done


def storage_full(exc: StorageError) -> bool:
    """Whether a storage error says the disk (or database) is full."""
    text = str(exc)
    return any(sign in text for sign in ("No space left", "disk is full", "could not extend"))


class ConflictError(StorageError):
    """A compare-and-set write found another revision than the one it expected.

    ``found`` is 0 when the session no longer exists. Nothing was written: read
    it again, then decide (no retry of the same write can succeed).
    """

    http_status = 409
    code = "conflict"
    retryable = False

    def __init__(self, session_id: str, expected: int, found: int):
        self.session_id = session_id
        self.expected = expected
        self.found = found
        if found:
            what = f"changed while this operation ran (revision {found}, expected {expected})"
        else:
            what = f"was deleted while this operation ran (expected revision {expected})"
        super().__init__(f"session {session_id!r} {what}; nothing was saved: run it again")


class ServeStartError(FolikoError):
    """``foliko serve`` cannot listen where it was asked to (a port in use)."""

    exit_code = ExitCode.STORAGE


class OutputError(FolikoError):
    """The results could not be written to standard output (exit 3)."""

    exit_code = ExitCode.STORAGE


class CorruptSessionError(StorageError):
    """A stored session that is damaged: it cannot be parsed, or what is stored does
    not add up (storage/integrity.py). Every read raises it and nothing writes to
    the session until a repair moves it aside or it is deleted."""

    http_status = 500
    code = "session_damaged"
    retryable = False  # a repair or a delete mends it, never a retry

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
    http_status = 409
    code = "session_busy"
    retryable = True

    def __init__(self, session_id: str, waited: float, holder: str | None):
        self.session_id = session_id
        self.holder = holder
        who = f" by {holder}" if holder else ""
        super().__init__(
            f"session {session_id!r} is busy: held{who} for more than {waited:g}s",
            fix="retry later or allow a longer timeout",
            hint=Hint.TIMEOUT,
        )


class BusyRejectedError(SessionBusyError):
    """A turn sent with ``if_busy="reject"`` found its session held by another
    turn (in this process or another, on this machine or another): nothing
    was sent or saved."""

    def __init__(self, session_id: str, holder: str | None):
        self.session_id = session_id
        self.holder = holder
        who = f" ({holder})" if holder else ""
        FolikoError.__init__(
            self,
            f"session {session_id!r} is busy with another turn{who}; this message was not sent",
            fix="send it again to wait for that turn, or to interrupt it",
            hint=Hint.IF_BUSY,
        )


class TurnInterruptedError(FolikoError):
    """A newer message to the session (``if_busy="interrupt"``) stopped this
    turn before it was saved: nothing of it was kept."""

    exit_code = ExitCode.SUPERSEDED
    http_status = 409
    code = "turn_interrupted"

    def __init__(self, session_id: str):
        self.session_id = session_id
        super().__init__(
            f"the turn in session {session_id!r} was interrupted by a newer message; "
            "nothing of it was saved",
            fix="read the session for the newer turn, or send this message again",
        )


class ModelError(FolikoError):
    """The model provider failed or was misconfigured."""

    exit_code = ExitCode.MODEL
    http_status = 502
    code = "model_error"
    retryable = True


class MCPServerError(FolikoError):
    """An MCP server that was asked for by name could not be started."""

    exit_code = ExitCode.MODEL


class MCPLoginError(UsageError):
    """An MCP server that needs the user to log in (OAuth) before it can be used.

    It stops the turn even when raised by a tool: only the user can fix it
    (under ``foliko serve``, whoever runs the server)."""

    http_status = 503
    code = "mcp_login_required"


class UnknownModelError(UsageError):
    http_status = 404
    code = "model_not_found"


class TurnTimeoutError(ModelError):
    http_status = 504
    code = "timeout"

    def __init__(self, timeout: float):
        self.timeout = timeout
        super().__init__(
            f"the turn did not finish within {timeout:g}s and was not saved",
            fix="allow a longer timeout",
            hint=Hint.TIMEOUT,
        )


class ToolError(Exception):
    """Raised by a tool to report a failure to the model as a tool result."""


class TypedToolFailedError(FolikoError):
    """A tool call the user typed (``/tool NAME {...}``) failed or was refused:
    the one thing the command was asked did not happen (the turn, the call and
    its error result, is saved all the same). Exit 1, as a failed model call."""

    exit_code = ExitCode.MODEL
    http_status = 502
    code = "tool_failed"

    def __init__(self, failures: tuple[str, ...]):
        self.failures = failures
        shown = "; ".join(" ".join(f.split()) for f in failures)
        super().__init__(
            f"the /tool call failed: {shown[:500]}",
            fix="fix the call's name or arguments (foliko mcp tools lists them) and send it again",
        )


class AgentNotFoundError(UsageError):
    def __init__(self, agent_id: str):
        self.agent_id = agent_id
        super().__init__(
            f"agent {agent_id!r} not found", fix="create it with get_or_create_agent_context"
        )


class StepFailed(FolikoError):
    """A workflow step failed; the exit code and HTTP status are the underlying error's."""

    def __init__(self, step: str, position: int, total: int, cause: Exception):
        self.step = step
        self.cause = cause
        for name in ("exit_code", "http_status", "code", "retryable"):
            if hasattr(cause, name):
                setattr(self, name, getattr(cause, name))
        super().__init__(
            f"workflow step {step!r} ({position} of {total}) failed: {cause}",
            fix="fix it and resume the workflow to continue from this step",
            hint=Hint.RESUME,
        )


class Interrupted(FolikoError):
    """SIGINT or SIGTERM came during an operation; ``message`` says what was kept.
    When the operation had committed before the signal, ``result`` is what it
    returned (a saved turn's TurnResult); else None."""

    exit_code = ExitCode.INTERRUPTED
    http_status = 503
    code = "shutting_down"
    retryable = True

    def __init__(self, message: str, *, signal_number: int = 2, result: Any = None):
        self.signal_number = signal_number
        self.result = result
        if signal_number == 15:
            self.exit_code = ExitCode.TERMINATED
        super().__init__(message)


class ModelTimeoutError(ModelError):
    """The provider did not answer within the turn's time."""

    http_status = 504
    code = "timeout"


class ModelRejectedError(ModelError):
    """The provider refused the request with a status no retry changes (``status``):
    a refusal of the request itself is the client's 400, the provider's refusal of
    foliko (its key, its permissions) or its own failure a 502."""

    retryable = False

    def __init__(self, message: str, status: int):
        self.status = status
        if 400 <= status < 500 and status not in (401, 403):
            self.http_status, self.code = 400, "model_rejected_request"
        super().__init__(message)


class ContextOverflowError(ModelError):
    """The prompt does not fit the model's context window; ``window`` when the server said."""

    http_status = 400
    code = "context_length_exceeded"
    retryable = False

    def __init__(self, message: str, window: int | None = None):
        self.window = window
        super().__init__(message)


class InvalidReplyError(ModelError):
    """The reply does not follow the JSON Schema the turn asked for."""

    code = "invalid_reply"
    retryable = False
