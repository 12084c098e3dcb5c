"""Every error contextledger raises, in one tree.

Callers can catch :class:`ContextLedgerError` to handle anything the library
reports, or a narrower class when they can act on it.  Each message names the
offending value and says what to do about it; no operation that raises leaves
partial state behind.

::

    ContextLedgerError
    ├── InvalidMessageError          a message or OpenAI dict that cannot be understood (ValueError)
    │   ├── UnknownRoleError         a role other than system, user, assistant, tool (or OpenAI's developer)
    │   └── TranscriptError          a JSONL transcript line that cannot be read (carries the line number)
    ├── ConfigurationError           a strategy, trigger or tokenizer built with bad arguments (ValueError)
    ├── MissingExtraError            an optional extra is not installed (ImportError; names the pip install line)
    │   └── TokenizerUnavailableError  an exact tokenizer whose optional package is not installed
    ├── CompactionError              a strategy that could not do what it was asked
    │   ├── SummarizationError       the summariser failed or replied with nothing; nothing was replaced
    │   └── SummaryCacheError        a summary cache could not be read or written; the summariser is asked instead
    ├── ModelError                   a chat model call failed; the session and history are as before the turn
    │   ├── ModelTimeoutError        the model did not answer in time
    │   ├── ModelRateLimitError      the provider kept refusing with 429 after the retries
    │   ├── ModelResponseError       the provider answered with an error status, or with something unreadable
    │   └── ModelConnectionError     the endpoint could not be reached
    ├── HistoryError                 a history store could not do what it was asked; nothing was half-written
    │   ├── HistoryUnavailableError  the store cannot be reached or opened (a server down, a locked file)
    │   ├── HistoryCorruptError      what the store holds cannot be read back as messages
    │   └── LeaseLostError           a fenced turn write whose writer no longer holds the session's lock
    ├── TurnOutcomeUnknownError      a turn's write was sent, never confirmed: stored once or not at all (names it)
    ├── AgentError                   an agent run could not complete; the session and history are as before the turn
    │   ├── ToolError                a function tool was described or called wrongly (bad signature, bad arguments)
    │   ├── ToolLoopError            the model kept calling tools past the agent's round limit
    │   ├── SessionError             a serialised session cannot be read back
    │   └── TurnIdReusedError        a turn id already stored with other input messages (ValueError)
    ├── FactsError                   the controlled-facts memory refused an operation; the store is unchanged
    │   ├── FactRejectedError        a batch of candidate facts was refused whole (carries every problem found)
    │   └── StaleTicketError         an extraction arrived for a turn or epoch that is no longer current
    ├── LabError                     the drift lab cannot run or had to stop
    │   ├── TimelineError            a timeline file is malformed (names the file, the entry and the problem)
    │   └── SummaryGuardError        a generated summary was empty or too long; the comparison stopped
    └── ProxyError                   `contextledger serve` refused a request (carries its HTTP status); nothing stored
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AgentError",
    "CompactionError",
    "ConfigurationError",
    "ContextLedgerError",
    "FactRejectedError",
    "FactsError",
    "HistoryCorruptError",
    "HistoryError",
    "HistoryUnavailableError",
    "InvalidMessageError",
    "LabError",
    "LeaseLostError",
    "MissingExtraError",
    "ModelConnectionError",
    "ModelError",
    "ModelRateLimitError",
    "ModelResponseError",
    "ModelTimeoutError",
    "ProxyError",
    "SessionError",
    "StaleTicketError",
    "SummarizationError",
    "SummaryCacheError",
    "SummaryGuardError",
    "TimelineError",
    "TokenizerUnavailableError",
    "ToolError",
    "ToolLoopError",
    "TranscriptError",
    "TurnIdReusedError",
    "TurnOutcomeUnknownError",
    "UnknownRoleError",
]


class ContextLedgerError(Exception):
    """Base class of every error the library raises on purpose."""


class InvalidMessageError(ContextLedgerError, ValueError):
    """A message, content part or OpenAI-format dict is malformed."""


class UnknownRoleError(InvalidMessageError):
    """A message's role is not one a chat model accepts."""


class TranscriptError(InvalidMessageError):
    """A line of a JSONL transcript is malformed; ``line`` is 1-based."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:"
        if line is not None:
            where += f"{line}:"
        super().__init__(f"{where} {message}" if where else message)
        self.path = path
        self.line = line


class ConfigurationError(ContextLedgerError, ValueError):
    """A strategy, trigger or tokenizer was constructed with invalid arguments."""


class MissingExtraError(ContextLedgerError, ImportError):
    """A feature needs an optional extra that is not installed.

    Every extra reports itself the same way, so one ``except MissingExtraError`` (or the
    ``ImportError`` a caller may already catch) handles them all; ``feature``, ``extra`` and
    ``install`` say what was asked for and the exact command that provides it.
    """

    def __init__(self, message: str | None = None, *, feature: str, extra: str, module: str | None = None) -> None:
        self.feature = feature
        self.extra = extra
        self.install = f"pip install 'contextledger[{extra}]'"
        if message is None:
            needs = f" (the {module!r} package)" if module else ""
            message = f"{feature} needs the {extra!r} extra{needs}: {self.install}"
        super().__init__(message, name=module)


class TokenizerUnavailableError(MissingExtraError):
    """The package behind an exact tokenizer is not installed."""


class CompactionError(ContextLedgerError):
    """A compaction strategy could not complete; the index was left as it was."""


class SummarizationError(CompactionError):
    """The summariser raised, timed out or replied with no text.

    The strategy restored every group it had excluded before raising, so the
    history is exactly as it was before the attempt.
    """


class SummaryCacheError(CompactionError):
    """A summary cache could not be read or written: the server is down, the file is locked or
    holds something else.

    :class:`~contextledger.compaction.SummarizationStrategy` logs it and calls its model as if
    the cache were empty (a failed write only costs a later call), so a request never fails
    because its cache did.
    """


class HistoryError(ContextLedgerError):
    """A history store failed; the operation left the stored history exactly as it was."""


class HistoryUnavailableError(HistoryError):
    """The history store cannot be reached or opened."""


class HistoryCorruptError(HistoryError):
    """Stored data cannot be read back as messages (it was written by something else, or damaged)."""


class LeaseLostError(HistoryError):
    """A turn write fenced by a lock on its session found the lock held by another token: the
    writer's lease ran out (a pause, a lost connection) and another writer may be running the
    session's next turn.  Nothing was written; run the turn again under the lock."""


class TurnOutcomeUnknownError(ContextLedgerError):
    """A turn's write reached for the store but its outcome never came back (a timeout after the
    command was sent, a connection lost mid-reply).

    The turn is stored exactly once or not at all, and only the store knows which: run the turn
    again with the same ``turn_id`` (``agent.run(..., turn_id=error.turn_id)``), which returns the
    stored reply without calling the model if it was stored, and runs the turn if it was not.
    Deliberately not a :class:`HistoryError`: those promise that nothing was written.
    """

    def __init__(self, message: str, *, turn_id: str, session_id: str) -> None:
        super().__init__(message)
        self.turn_id = turn_id
        self.session_id = session_id


class ModelError(ContextLedgerError):
    """A call to a chat model failed; nothing the caller had was changed by it."""


class ModelTimeoutError(ModelError):
    """The model did not answer within the configured timeout."""


class ModelRateLimitError(ModelError):
    """The provider answered 429 (rate limited) on every attempt."""


class ModelResponseError(ModelError):
    """The provider answered with an error status, or with a body that is not a valid response."""


class ModelConnectionError(ModelError):
    """The model endpoint could not be reached."""


class AgentError(ContextLedgerError):
    """An agent run failed; the session and its history are exactly as they were before the turn."""


class ToolError(AgentError, ValueError):
    """A function tool cannot be described from its signature, or was called with arguments it cannot take."""


class ToolLoopError(AgentError):
    """The model asked for tools on every round up to the agent's limit without giving an answer."""


class SessionError(AgentError, ValueError):
    """A serialised session is not valid JSON of the expected shape."""


class TurnIdReusedError(AgentError, ValueError):
    """A run gave a turn id that is already stored for the session with other input messages.

    A turn id names one turn; replaying it with another question would hand back an answer to a
    question that was not asked.  Give each new turn a new id.
    """


class FactsError(ContextLedgerError):
    """The facts memory refused an operation; the store is exactly as it was."""


class FactRejectedError(FactsError, ValueError):
    """A batch of candidate facts was refused as a whole; nothing was admitted and there is no fallback.

    ``problems`` lists every reason found, each naming the key or value concerned.
    """

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


class StaleTicketError(FactsError):
    """An extraction was applied with a ticket from an older turn or from before a ``forget``."""


class LabError(ContextLedgerError):
    """The drift lab cannot run as configured, or stopped a comparison."""


class TimelineError(LabError, ValueError):
    """A timeline file is malformed; the message names the file, the entry and the problem."""

    def __init__(self, message: str, *, path: str | None = None, entry: str | None = None) -> None:
        where = ", ".join(part for part in (path, entry) if part)
        super().__init__(f"{where}: {message}" if where else message)
        self.path = path
        self.entry = entry


class SummaryGuardError(LabError):
    """A generated summary was empty or longer than allowed; the comparison stopped with no fallback text."""


class ProxyError(ContextLedgerError):
    """A request that ``contextledger serve`` refuses or could not complete; nothing was stored
    and no fact was admitted.

    It carries what the HTTP answer needs, in OpenAI's error shape: ``status``, ``error_type``
    (``invalid_request_error``, ``authentication_error``, ``not_found_error``, ``conflict_error``,
    ``upstream_error``...), and a machine-readable ``code``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        error_type: str = "invalid_request_error",
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.code = code
        # What the answer carries besides the body: an upstream's Retry-After and rate-limit
        # headers, by which SDK clients time their retries, or Connection: close.
        self.headers = dict(headers or {})
