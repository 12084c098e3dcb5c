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

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.messages``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

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

from typing import TYPE_CHECKING

from contextledger._deprecated import moved_name
from contextledger.messages._anthropic import (
    from_anthropic,
    to_anthropic,
)
from contextledger.messages._contents import (
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
)
from contextledger.messages._jsonl import dump_jsonl, load_jsonl, read_jsonl, write_jsonl
from contextledger.messages._message import (
    PROVIDER_COMPACTION_TYPE,
    ROLES,
    SUMMARY_PROPERTY,
    Message,
    newest_provider_compaction,
)
from contextledger.messages._message import Role as Role
from contextledger.messages._openai import (
    from_openai,
    to_openai,
)
from contextledger.messages._responses import (
    from_responses,
    to_responses,
)
from contextledger.messages._rules import (
    anthropic_problems,
    chat_problems,
    problems_for,
    responses_problems,
)
from contextledger.messages._validate import Problem, validate

__all__ = [
    "PROVIDER_COMPACTION_TYPE",
    "ROLES",
    "SUMMARY_PROPERTY",
    "ApprovalRequestContent",
    "ApprovalResponseContent",
    "Content",
    "FunctionCallContent",
    "FunctionResultContent",
    "HostedCallContent",
    "HostedResultContent",
    "Message",
    "OpaqueContent",
    "Problem",
    "ReasoningContent",
    "TextContent",
    "anthropic_problems",
    "chat_problems",
    "dump_jsonl",
    "from_anthropic",
    "from_openai",
    "from_responses",
    "load_jsonl",
    "newest_provider_compaction",
    "problems_for",
    "read_jsonl",
    "responses_problems",
    "to_anthropic",
    "to_openai",
    "to_responses",
    "validate",
    "write_jsonl",
]

if not TYPE_CHECKING:
    # Names that were public here before and are internal now: still importable, with a
    # DeprecationWarning, until 0.6 (the release rule in CHANGELOG.md).
    _MOVED = {
        "ANTHROPIC_PROPERTY": "contextledger.messages._anthropic",
        "HOSTED_TOOLS": "contextledger.messages._contents",
        "ItemRules": "contextledger.messages._rules",
        "RESPONSES_PROPERTY": "contextledger.messages._responses",
        "SUMMARY_SOURCE_PROPERTY": "contextledger.messages._message",
        "answered_ids": "contextledger.messages._contents",
        "assistant_text_message": "contextledger.messages._message",
        "held_by_provider_compaction": "contextledger.messages._message",
        "is_provider_compaction_content": "contextledger.messages._message",
        "item_dict": "contextledger.messages._responses",
        "item_rules": "contextledger.messages._rules",
        "item_runs": "contextledger.messages._responses",
        "joins_calls": "contextledger.messages._responses",
        "kept_as_given": "contextledger.messages._responses",
        "message_blocks": "contextledger.messages._anthropic",
        "message_from_openai": "contextledger.messages._openai",
        "message_to_openai": "contextledger.messages._openai",
        "opened_ids": "contextledger.messages._contents",
        "result_text": "contextledger.messages._openai",
        "set_token_memo": "contextledger.messages._message",
        "system_blocks": "contextledger.messages._anthropic",
        "system_messages": "contextledger.messages._anthropic",
        "thawed": "contextledger.messages._contents",
    }

    def __getattr__(name: str) -> object:
        return moved_name(__name__, name, _MOVED)
