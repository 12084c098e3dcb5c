"""Upstream replies as stored messages, and stored turns as replies again.

The assistant message a session stores keeps the reply's standard fields (what the next request
sends back to the model) and, aside in ``additional_properties`` (never sent to a model), the
reply's id, model, creation time, usage and finish reason: a retried request is then answered
with the very reply the first attempt got, as JSON or as a stream.
"""

from __future__ import annotations

from typing import Any

from contextledger.exceptions import InvalidMessageError, ProxyError
from contextledger.history import StoredTurn
from contextledger.messages import Message
from contextledger.messages._openai import message_from_openai, message_to_openai
from contextledger.serve._stream import DONE_EVENT, sse_event

__all__ = ["REPLY_PROPERTY", "completion_events", "reply_message", "stored_completion"]

REPLY_PROPERTY = "_contextledger_reply"
_REPLY_FIELDS = ("role", "content", "name", "tool_calls", "refusal")


def reply_message(message: dict[str, Any], reply: dict[str, Any]) -> Message:
    """The assistant message to store for the upstream's ``message``, with ``reply``'s metadata aside."""
    fields = {key: message[key] for key in _REPLY_FIELDS if message.get(key) is not None}
    fields.setdefault("content", None)
    fields["role"] = "assistant"
    fields["_contextledger"] = {"additional_properties": {REPLY_PROPERTY: reply}}
    try:
        return message_from_openai(fields)
    except InvalidMessageError as error:
        raise ProxyError(
            f"the upstream's reply message cannot be read ({error}); nothing was stored",
            status=502,
            error_type="upstream_error",
            code="upstream_invalid_response",
        ) from None


def stored_completion(done: StoredTurn) -> dict[str, Any]:
    """A chat completion rebuilt from a stored turn: the same message, id, model and usage as the first answer."""
    message = done.reply[-1]
    sent = message_to_openai(message, metadata=True)  # thawed: plain dicts and lists throughout
    meta = sent.pop("_contextledger", {}).get("additional_properties", {}).get(REPLY_PROPERTY) or {}
    finish = meta.get("finish_reason") or ("tool_calls" if sent.get("tool_calls") else "stop")
    completion = {
        "id": meta.get("id") or f"chatcmpl-{done.turn_id}",
        "object": "chat.completion",
        "created": meta.get("created") or 0,
        "model": meta.get("model") or "",
        "choices": [{"index": 0, "message": sent, "finish_reason": finish, "logprobs": None}],
    }
    if meta.get("usage") is not None:
        completion["usage"] = meta["usage"]
    return completion


def completion_events(completion: dict[str, Any]) -> bytes:
    """The same completion as the events of a stream: the whole message in one chunk, then ``[DONE]``."""
    choice = completion["choices"][0]
    delta = dict(choice["message"])
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": index, **call} for index, call in enumerate(delta["tool_calls"])]
    base = {key: completion[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]},
    ]
    return b"".join(sse_event(chunk) for chunk in chunks) + DONE_EVENT
