"""contextledger: control what an LLM agent sends to its model as a conversation grows.

The core has no dependencies.  Integrations (exact tokenizers, model clients,
Redis, other frameworks) live in their own modules and import their package
only when used.

What this package holds itself (the rest is imported from its subpackage):

- messages (from :mod:`contextledger.messages`): :class:`Message` and its contents
  (:class:`TextContent`, :class:`ReasoningContent`, :class:`FunctionCallContent`,
  :class:`FunctionResultContent`, :class:`HostedCallContent`, :class:`HostedResultContent`,
  :class:`ApprovalRequestContent`, :class:`ApprovalResponseContent`, :class:`OpaqueContent`);
  OpenAI's format both ways (:func:`from_openai`, :func:`to_openai`), JSONL transcripts
  (:func:`read_jsonl`, :func:`write_jsonl`), and :func:`validate` with the :class:`Problem` it
  reports;
- token counting (from :mod:`contextledger.tokenizers`): the :class:`Tokenizer` protocol,
  :class:`CharacterEstimatorTokenizer`, :class:`OpenAITokenizer` and :func:`get_tokenizer`;
- the errors most callers meet (from :mod:`contextledger.exceptions`, which draws the whole
  tree): :class:`ContextLedgerError`, :class:`InvalidMessageError`, :class:`UnknownRoleError`,
  :class:`TranscriptError`, :class:`ConfigurationError`, :class:`TokenizerUnavailableError`,
  :class:`CompactionError`, :class:`SummarizationError`.

The subpackages: ``compaction`` (the index, triggers, strategies), ``facts`` (the controlled-facts
memory), ``agents`` (the runtime), ``clients`` (chat models), ``history`` (stores), ``lab`` (the
drift lab), ``serve`` (the proxy), ``integrations`` (other frameworks).
"""

from contextledger.exceptions import (
    CompactionError,
    ConfigurationError,
    ContextLedgerError,
    InvalidMessageError,
    SummarizationError,
    TokenizerUnavailableError,
    TranscriptError,
    UnknownRoleError,
)
from contextledger.messages import (
    ApprovalRequestContent,
    ApprovalResponseContent,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    OpaqueContent,
    Problem,
    ReasoningContent,
    TextContent,
    from_openai,
    read_jsonl,
    to_openai,
    validate,
    write_jsonl,
)
from contextledger.tokenizers import CharacterEstimatorTokenizer, OpenAITokenizer, Tokenizer, get_tokenizer

# The one place the version is written (pyproject.toml reads it); semantic versioning, bumped when a
# wave of work lands, each release described in CHANGELOG.md.
__version__ = "0.5.0"

__all__ = [
    "ApprovalRequestContent",
    "ApprovalResponseContent",
    "CharacterEstimatorTokenizer",
    "CompactionError",
    "ConfigurationError",
    "ContextLedgerError",
    "FunctionCallContent",
    "FunctionResultContent",
    "HostedCallContent",
    "HostedResultContent",
    "InvalidMessageError",
    "Message",
    "OpaqueContent",
    "OpenAITokenizer",
    "Problem",
    "ReasoningContent",
    "SummarizationError",
    "TextContent",
    "Tokenizer",
    "TokenizerUnavailableError",
    "TranscriptError",
    "UnknownRoleError",
    "from_openai",
    "get_tokenizer",
    "read_jsonl",
    "to_openai",
    "validate",
    "write_jsonl",
]
