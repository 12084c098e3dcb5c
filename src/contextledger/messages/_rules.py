"""Each provider's structural rules for a request body, checked on the body as it goes on the wire.

A body that breaks one of these rules is refused by the provider with a 400, after the request
has crossed the network and, for a proxy, after the client has waited for it.  Checking the body
here lets the proxy answer at once with the same refusal and lets compaction prove that what it
sends still keeps the rules.  The checks are written from each API's reference, one rule each;
every :class:`Problem` names the rule by a stable ``code`` and says what to change.

Only structure is refused: the pairing of calls with their results, the order of roles, empty
texts, duplicate ids, limits.  Fields, block types and item types not named here pass through
unchecked, because providers add them every month and refusing one would break a client that is
right.  No check raises: any JSON value, however malformed, gives a list of problems.

A stateless client sends its whole history on every request, so the checks also resume:
:func:`item_rules` gives an :class:`ItemRules` that is fed a body's items and keeps what it needs
to judge more, so the proxy copies the one it had for the body before and feeds only what the new
body adds.  The three functions below are the same rules fed a whole body at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from contextledger.exceptions import ConfigurationError
from contextledger.messages._anthropic_rule_state import AnthropicRules, anthropic_payload_problems
from contextledger.messages._rule_state import BODY, ChatRules, ResponsesRules, not_a_body
from contextledger.messages._validate import Problem

__all__ = [
    "ItemRules",
    "anthropic_problems",
    "chat_problems",
    "item_rules",
    "problems_for",
    "responses_problems",
]


class ItemRules(Protocol):
    """One API's rules checked item by item, so a body that repeats an earlier one and adds to it
    is checked for only what it adds.

    Problems are those of a body whose array (``messages`` or ``input``) is exactly the items fed
    so far, found as one pass over the whole body finds them.  Nothing is reported early that a
    later item or the body's other fields could still change.
    """

    def feed(self, items: Sequence[Any]) -> None:
        """Read the next items of the body's array, their positions continuing from those fed before."""
        ...

    def problems(self, payload: Mapping[str, Any]) -> list[Problem]:
        """The problems of the body whose array is the items fed so far and whose other fields
        (``system``, ``tools``, ``previous_response_id``, ``conversation``) are ``payload``'s; the
        array field of ``payload`` is not read (an array that is no list is for the caller to
        refuse, as the functions below do).  The state is left as it was, so more items may be fed
        and problems asked for again."""
        ...

    def copy(self) -> ItemRules:
        """An independent copy, so the state at the end of one body can serve every body that
        continues it; it copies what the rules remember, not the items."""
        ...


def item_rules(api: Literal["chat", "responses", "anthropic"]) -> ItemRules:
    """The rules of an API with nothing fed yet."""
    if api == "chat":
        return ChatRules()
    if api == "responses":
        return ResponsesRules()
    if api == "anthropic":
        return AnthropicRules()
    raise ConfigurationError(f"no rules for the API {api!r}; name 'chat', 'responses' or 'anthropic'")


def problems_for(api: Literal["chat", "responses", "anthropic"], payload: Mapping[str, Any]) -> list[Problem]:
    """The problems of a body for the API it is sent to, so a caller holding the API's name needs
    no table of its own."""
    if api == "anthropic":
        return anthropic_problems(payload)
    if api == "responses":
        return responses_problems(payload)
    return chat_problems(payload)


def anthropic_problems(payload: Mapping[str, Any]) -> list[Problem]:
    """What Anthropic's Messages API would refuse in a request body (``messages``, ``system``,
    ``tools``).

    The rules, from the API reference and its tool-use guide:

    - ``messages`` holds at least one message, and the first is the user's.
    - A role is ``user`` or ``assistant``; instructions go in the top-level ``system``.
    - Consecutive messages of one role are joined by the API into one turn, so every rule below
      reads a run of same-role messages as one turn.
    - Every ``tool_use`` of an assistant turn is answered by a ``tool_result`` with its id in the
      very next turn, which is the user's; those results open that turn, before any other block.
    - A ``tool_result`` answers a ``tool_use`` of the assistant turn just before it.
    - ``tool_use`` ids are unique in the request.
    - Every message has content (not ``""``, not ``[]``) except an optional final assistant
      message, which the model continues; no text block is empty.
    - At most four ``cache_control`` breakpoints, counted over ``tools``, ``system`` blocks and
      message blocks (those inside a tool result too).

    Thinking blocks must reach the API exactly as the model wrote them; one body cannot show an
    edit, so that rule is left to the code that keeps the history.
    """
    if not isinstance(payload, Mapping):
        return not_a_body(payload)
    messages = payload.get("messages")
    if messages is not None and not isinstance(messages, list):
        problems, _ = anthropic_payload_problems(payload)
        return [*problems, _messages_not_a_list()]
    rules = AnthropicRules()
    rules.feed(messages or ())
    return rules.problems(payload)


def responses_problems(payload: Mapping[str, Any]) -> list[Problem]:
    """What the Responses API would refuse in a request body's ``input``.

    The rules, from the API reference and its function-calling guide:

    - ``input`` is a string (always valid) or a non-empty list of items.
    - A call the client runs (``function_call``, ``custom_tool_call``, ``computer_call``,
      ``local_shell_call``, ``shell_call``, ``apply_patch_call``) is answered by its output item
      (``<type>_output``) with the same ``call_id``, after it; an output answers a call.  An
      ``mcp_approval_response`` answers the ``mcp_approval_request`` whose ``id`` it names.
    - Call ids are unique among calls, and item ``id``\\ s among items.
    - A ``reasoning`` item is followed by the item it reasoned for, so it is never last.
    - Message items have the role ``user``, ``assistant``, ``system`` or ``developer``.

    With ``previous_response_id`` or ``conversation`` the earlier items are held upstream, so an
    output whose call is not in this input is expected.  A ``compaction`` item stands for the
    items before it in the same way: items before the newest one are held by it, so neither a call
    before it without its output nor an output without its call is a fault.  An approval request
    left unanswered is the client declining to answer, not a fault.
    """
    if not isinstance(payload, Mapping):
        return not_a_body(payload)
    items = payload.get("input")
    if items is None or isinstance(items, str):
        return []  # a string is one user message; no input at all is for the API to judge with `prompt`
    if not isinstance(items, list):
        return [Problem(BODY, "malformed_body", '"input" must be a string or a list of items')]
    rules = ResponsesRules()
    rules.feed(items)
    return rules.problems(payload)


def chat_problems(payload: Mapping[str, Any]) -> list[Problem]:
    """What a chat-completions API would refuse in a request body's ``messages``, read as it goes
    on the wire.

    The rules, from the Chat Completions reference and its function-calling guide:

    - ``messages`` holds at least one message, each with a known role (``system``,
      ``developer``, ``user``, ``assistant``, ``tool``, or the older ``function``).
    - A message has content: ``content`` may be missing or null only on an assistant message that
      has ``tool_calls`` (or the older ``function_call``, or ``audio`` or a ``refusal``).
    - A tool call has a non-empty string ``id``; a ``function`` call (the type when none is given)
      names its function with a non-empty string and gives its ``arguments`` as a string.
    - Every tool call is answered by a ``tool`` message with its ``tool_call_id`` before the next
      message that is not a tool message; a tool message answers a call of the assistant message
      its run of tool messages follows.
    - Call ids are unique in the request.

    Tool call types other than ``function`` pass through with only their ``id`` checked.
    """
    if not isinstance(payload, Mapping):
        return not_a_body(payload)
    messages = payload.get("messages")
    if messages is not None and not isinstance(messages, list):
        return [_messages_not_a_list()]
    rules = ChatRules()
    rules.feed(messages or ())
    return rules.problems(payload)


def _messages_not_a_list() -> Problem:
    return Problem(BODY, "malformed_body", '"messages" must be a list of message objects')
