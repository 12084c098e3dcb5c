"""A deterministic chat client that replays scripted replies, for tests and examples."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from contextledger.clients._protocol import ChatResponse, Usage
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer

__all__ = ["ScriptedChatClient"]

Reply = str | Message | BaseException | Callable[[Sequence[Message]], "str | Message"]


class ScriptedChatClient:
    """Answers each call with the next scripted reply, recording every request it receives.

    A reply may be text, an assistant :class:`Message` (to script tool calls),
    an exception to raise, or a function of the request returning either.
    When the script runs out the last reply repeats.  Usage is estimated with
    the character tokenizer and labelled so, unless ``report_usage=False``, in
    which case it is ``None`` (the provider reported nothing).  The tools and
    options of each call are recorded beside its request.
    """

    def __init__(self, replies: Iterable[Reply], *, report_usage: bool = True) -> None:
        self.replies = list(replies)
        if not self.replies:
            raise ValueError("ScriptedChatClient needs at least one reply")
        self.requests: list[list[Message]] = []
        self.tools: list[list[Mapping[str, Any]]] = []
        self.options: list[dict[str, Any]] = []
        self.report_usage = report_usage
        self._tokenizer = CharacterEstimatorTokenizer()

    async def get_response(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **options: Any,
    ) -> ChatResponse:
        self.requests.append(list(messages))
        self.tools.append(list(tools or ()))
        self.options.append(dict(options))
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        if isinstance(reply, BaseException):
            raise reply
        produced = reply(messages) if callable(reply) else reply
        message = produced if isinstance(produced, Message) else Message.assistant(produced)
        usage = None
        if self.report_usage:
            usage = Usage(
                input_tokens=sum(self._tokenizer.count_messages(list(messages))),
                output_tokens=self._tokenizer.count_message(message),
                is_estimate=True,
            )
        return ChatResponse(text=message.text, messages=(message,), usage=usage)
