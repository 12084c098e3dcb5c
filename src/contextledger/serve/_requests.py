"""Reading what a client sent: JSON bodies, chat-completions payloads, messages, header values.

Every refusal is a :class:`ProxyError` with status 400 and a code, so it reaches the client in
OpenAI's error shape.  A stateless client sends its whole history on every call, and nearly all
of it was in its previous call too; :class:`MessageReader` therefore remembers the messages it
has converted, keyed by their exact JSON values, and converts only what it has not seen.  A
remembered message is the same immutable object as before, so its token count (memoised on it)
is not computed again either.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Sequence
from typing import Any

from contextledger.exceptions import InvalidMessageError, ProxyError
from contextledger.messages import Message, message_from_openai

__all__ = ["MessageReader", "bad_request", "json_object", "parse_payload", "turn_id_of", "user_text"]

_REMEMBERED = 16_384


def bad_request(message: str, code: str) -> ProxyError:
    return ProxyError(message, status=400, code=code)


def json_object(body: bytes, what: str) -> dict[str, Any]:
    """The body as a JSON object (an empty body is ``{}``), or 400 saying what was expected."""
    if not body.strip():
        return {}
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise bad_request(f"the request body is not valid JSON ({error}); send {what}", "invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request(f"the request body must be {what}, got {type(data).__name__}", "invalid_body")
    return data


def parse_payload(body: bytes) -> dict[str, Any]:
    """A chat-completions request: a JSON object with a non-empty ``messages`` list."""
    payload = json_object(body, "a chat-completions JSON object")
    if not isinstance(payload.get("messages"), list) or not payload["messages"]:
        raise bad_request("'messages' must be a non-empty list of chat messages", "invalid_messages")
    if "stream" in payload and not isinstance(payload["stream"], bool):
        raise bad_request(f"'stream' must be true or false, got {payload['stream']!r}", "invalid_stream")
    return payload


def turn_id_of(value: str | None) -> str | None:
    """The ``Idempotency-Key`` header as a turn id: printable text of 1 to 256 characters."""
    if value is None:
        return None
    if not value or len(value) > 256 or not value.isprintable():
        raise bad_request(
            f"Idempotency-Key {value[:80]!r} is not valid: use 1 to 256 printable characters", "invalid_idempotency_key"
        )
    return value


def user_text(messages: Sequence[Message]) -> str | None:
    """The turn's own user text, one message per line (a line break separates declarations)."""
    texts = [message.text for message in messages if message.role == "user" and message.text.strip()]
    return "\n".join(texts) if texts else None


def _key(value: Any) -> Hashable:
    """``value`` as a hashable key that only an equal JSON value shares (``1``, ``1.0`` and ``true``
    are told apart, and so are a list and an object)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return (dict, tuple((name, _key(item)) for name, item in value.items()))
    if isinstance(value, list):
        return (list, tuple(_key(item) for item in value))
    return (type(value), value)


class MessageReader:
    """Converts OpenAI message dicts to :class:`Message` objects, remembering the last 16,384 it made."""

    def __init__(self) -> None:
        self._made: dict[Hashable, Message] = {}

    def read(self, items: list[Any]) -> list[Message]:
        """The messages, or 400 naming the first malformed one."""
        messages: list[Message] = []
        for position, item in enumerate(items):
            key = _key(item)
            message = self._made.get(key)
            if message is None:
                try:
                    message = message_from_openai(item, position=position)
                except InvalidMessageError as error:
                    raise bad_request(f"'messages' is malformed: {error}", "invalid_messages") from None
                if len(self._made) >= _REMEMBERED:
                    del self._made[next(iter(self._made))]  # the oldest first
                self._made[key] = message
            messages.append(message)
        return messages
