"""contextledger: control what an LLM agent sends to its model as a conversation grows.

The core has no dependencies.  Integrations (exact tokenizers, model clients,
Redis, other frameworks) live in their own modules and import their package
only when used.
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

__version__ = "0.1.0"

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
