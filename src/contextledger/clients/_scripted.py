"""A deterministic chat client that replays scripted replies, for tests and examples."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from contextledger.clients._protocol import ChatClient, ChatResponse, Usage
from contextledger.exceptions import ConfigurationError
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer

__all__ = ["ScriptedChatClient"]

Answer: TypeAlias = "str | Message | ChatResponse"
Reply: TypeAlias = (
    "str | Message | ChatResponse | BaseException | ChatClient"
    " | Callable[[Sequence[Message]], Answer | Awaitable[Answer]]"
)


class ScriptedChatClient:
    """Answers each call with the next scripted reply, recording every request it receives.

    A reply may be:

    - text, or an assistant :class:`Message` (to script tool calls), which become the response's
      one message, with usage estimated by the character tokenizer and labelled so (``None``,
      as from a provider that reports nothing, with ``report_usage=False``);
    - a :class:`ChatResponse`, returned exactly as it is (several messages, usage of your choice,
      or a malformed response, to see what the caller does with it);
    - an exception, raised;
    - another chat client (the built-in :class:`~contextledger.clients.OfflineModel`...): the
      call, tools and options included, is answered by it, so a real model's requests are
      recorded too;
    - a function of the request, sync or async, returning text, a message or a response (what
      else it returns is handed back unchanged, as from a client that breaks the protocol).

    When the script runs out the last reply repeats.  ``replies`` is the script itself: it may
    start empty (a call then raises :class:`ConfigurationError`, and is neither counted nor
    recorded) and be extended between calls; the position in it is the number of calls answered
    (``calls``), so clearing ``requests`` does not replay anything.  The tools and options of
    each call are recorded beside its request.
    """

    def __init__(self, replies: Iterable[Reply] = (), *, report_usage: bool = True) -> None:
        self.replies: list[Reply] = list(replies)
        self.requests: list[list[Message]] = []
        self.tools: list[list[Mapping[str, Any]]] = []
        self.options: list[dict[str, Any]] = []
        self.calls = 0
        self.report_usage = report_usage
        self._tokenizer = CharacterEstimatorTokenizer()

    def __repr__(self) -> str:
        return f"ScriptedChatClient({len(self.replies)} replies, {self.calls} calls)"

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        if not self.replies:
            raise ConfigurationError(
                "ScriptedChatClient has no reply scripted: give it replies when it is built, "
                "or append them to .replies before the call"
            )
        self.calls += 1
        self.requests.append(list(messages))
        self.tools.append(list(tools or ()))
        self.options.append(dict(options))
        reply = self.replies[min(self.calls, len(self.replies)) - 1]
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, ChatClient):
            return await reply.get_response(messages, tools=tools, **options)
        produced: Any = reply(messages) if callable(reply) else reply
        if inspect.isawaitable(produced):
            produced = await produced
        if isinstance(produced, str):
            produced = Message.assistant(produced)
        if not isinstance(produced, Message):
            return produced  # type: ignore[no-any-return]  # a ChatResponse, or what a broken client returns
        usage = None
        if self.report_usage:
            usage = Usage(
                input_tokens=sum(self._tokenizer.count_messages(list(messages))),
                output_tokens=self._tokenizer.count_message(produced),
                is_estimate=True,
            )
        return ChatResponse(text=produced.text, messages=(produced,), usage=usage)
