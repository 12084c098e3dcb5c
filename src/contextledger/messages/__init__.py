"""Chat messages, their contents, and lossless conversion to and from OpenAI's format.

>>> from contextledger.messages import Message, from_openai, to_openai, validate

Messages are immutable values.  Compaction never edits a caller's message: it marks groups in an
index and projects the included messages, so the objects a caller handed in are exactly the
objects that come back out.

OpenAI Chat Completions dicts convert both ways without loss: several ``tool_calls`` in one
message, ``tool_call_id``, ``name``, list-of-parts content, ``reasoning_content`` and any key this
package does not know are all kept and written back as they came.

Hosted (server-side) tool calls — MCP calls, code interpreter, web or file search, image
generation, shell and computer use — and approval requests and responses are real contents, not
opaque parts: each carries its id, and compaction pairs it with its output by that id (design.md#units).
Chat Completions has no field for them, so they travel as content parts of our own
(``{"type": "hosted_call", ...}``) that convert back to the same contents.

Where things live (every name is imported from here, ``contextledger.messages``):

- the contents, ``_contents.py``: :class:`TextContent`, :class:`ReasoningContent`,
  :class:`FunctionCallContent`, :class:`FunctionResultContent`, :class:`HostedCallContent`,
  :class:`HostedResultContent` (with :data:`HOSTED_TOOLS`, the hosted tools we name),
  :class:`ApprovalRequestContent`, :class:`ApprovalResponseContent`, :class:`OpaqueContent`,
  the union ``Content``, :func:`opened_ids` / :func:`answered_ids` (the ids contents open
  and answer, by which calls pair with their results), and ``thawed`` (a mutable deep copy of
  the frozen data a message holds, for the library's writers and adapters);
- the message, ``_message.py``: :class:`Message`, ``ROLES``, the summary markers
  :data:`SUMMARY_PROPERTY` and :data:`SUMMARY_SOURCE_PROPERTY`, the providers' own compaction
  items (:data:`PROVIDER_COMPACTION_TYPE`, :func:`is_provider_compaction_content`,
  ``Message.is_provider_compaction``, :func:`newest_provider_compaction`, the boundary every
  compaction strategy keeps, and :func:`held_by_provider_compaction`, what a pairing check
  reads), and two fast paths the library itself uses on thousands of messages per call,
  ``set_token_memo`` (tokenizers) and
  ``assistant_text_message`` (compaction);
- the OpenAI codec, ``_openai.py``: :func:`message_from_openai`, :func:`from_openai`,
  :func:`message_to_openai`, :func:`to_openai`, and :func:`result_text` (the text of a tool
  result given as parts, read the same way in every format);
- the Responses API's input items, ``_responses.py``: :func:`from_responses` and
  :func:`to_responses` (items become messages and come back as the very same items; what has no
  field here is kept under :data:`RESPONSES_PROPERTY`), :func:`item_dict`, and
  :func:`kept_as_given` (a compacted item list with every kept item the object it came from),
  :func:`item_runs` (the slices of items that make one message each, for a reader that
  remembers what it converted) and ``joins_calls`` (whether an item is one of such a run, told
  of each item once by the proxy's reader);
- JSONL transcripts, ``_jsonl.py``: :func:`load_jsonl`, :func:`read_jsonl`,
  :func:`dump_jsonl`, :func:`write_jsonl`;
- Anthropic's Messages API, ``_anthropic.py``: :func:`from_anthropic` and :func:`to_anthropic`
  (blocks become contents and come back byte for byte, what has no field here kept under
  :data:`ANTHROPIC_PROPERTY`; a ``tool_use`` pairs with its ``tool_result`` blocks by id),
  :func:`message_blocks`, :func:`system_messages` and :func:`system_blocks` (the top-level
  ``system``);
- validation, ``_validate.py``: :func:`validate`, which reports each :class:`Problem` a
  chat-completions API would reject;
- each provider's rules for a whole request body, ``_rules.py``: :func:`chat_problems`,
  :func:`responses_problems` and :func:`anthropic_problems` (the body as it goes on the wire,
  each :class:`Problem` at its position with a stable rule code), and :func:`problems_for`
  (the same, by the API's name); the same rules resumable, :func:`item_rules` and its
  :class:`ItemRules` (fed a body's items a few at a time and copied, so a body that repeats the
  one before it is checked for only the items it adds; their state in ``_rule_state.py`` and
  ``_anthropic_rule_state.py``).
"""

from contextledger.messages._anthropic import (
    ANTHROPIC_PROPERTY,
    from_anthropic,
    message_blocks,
    system_blocks,
    system_messages,
    to_anthropic,
)
from contextledger.messages._contents import (
    HOSTED_TOOLS,
    ApprovalRequestContent,
    ApprovalResponseContent,
    Content,
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    OpaqueContent,
    ReasoningContent,
    TextContent,
    answered_ids,
    opened_ids,
)
from contextledger.messages._contents import thawed as thawed
from contextledger.messages._jsonl import dump_jsonl, load_jsonl, read_jsonl, write_jsonl
from contextledger.messages._message import (
    PROVIDER_COMPACTION_TYPE,
    ROLES,
    SUMMARY_PROPERTY,
    SUMMARY_SOURCE_PROPERTY,
    Message,
    held_by_provider_compaction,
    is_provider_compaction_content,
    newest_provider_compaction,
)
from contextledger.messages._message import Role as Role
from contextledger.messages._message import assistant_text_message as assistant_text_message
from contextledger.messages._message import set_token_memo as set_token_memo
from contextledger.messages._openai import (
    from_openai,
    message_from_openai,
    message_to_openai,
    result_text,
    to_openai,
)
from contextledger.messages._responses import (
    RESPONSES_PROPERTY,
    from_responses,
    item_dict,
    item_runs,
    kept_as_given,
    to_responses,
)
from contextledger.messages._responses import joins_calls as joins_calls
from contextledger.messages._rules import (
    ItemRules,
    anthropic_problems,
    chat_problems,
    item_rules,
    problems_for,
    responses_problems,
)
from contextledger.messages._validate import Problem, validate

__all__ = [
    "ANTHROPIC_PROPERTY",
    "HOSTED_TOOLS",
    "PROVIDER_COMPACTION_TYPE",
    "RESPONSES_PROPERTY",
    "ROLES",
    "SUMMARY_PROPERTY",
    "SUMMARY_SOURCE_PROPERTY",
    "ApprovalRequestContent",
    "ApprovalResponseContent",
    "Content",
    "FunctionCallContent",
    "FunctionResultContent",
    "HostedCallContent",
    "HostedResultContent",
    "ItemRules",
    "Message",
    "OpaqueContent",
    "Problem",
    "ReasoningContent",
    "TextContent",
    "answered_ids",
    "anthropic_problems",
    "chat_problems",
    "dump_jsonl",
    "from_anthropic",
    "from_openai",
    "from_responses",
    "held_by_provider_compaction",
    "is_provider_compaction_content",
    "item_dict",
    "item_rules",
    "item_runs",
    "kept_as_given",
    "load_jsonl",
    "message_blocks",
    "message_from_openai",
    "message_to_openai",
    "newest_provider_compaction",
    "opened_ids",
    "problems_for",
    "read_jsonl",
    "responses_problems",
    "result_text",
    "system_blocks",
    "system_messages",
    "to_anthropic",
    "to_openai",
    "to_responses",
    "validate",
    "write_jsonl",
]
