"""A deterministic chat client that replays scripted replies, for tests and examples."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from contextledger.clients._protocol import ChatResponse, Usage
from contextledger.messages import Message
from contextledger.tokenizers import CharacterEstimatorTokenizer

__all__ = ["ScriptedChatClient"]

Reply = str | BaseException | Callable[[Sequence[Message]], str]


class ScriptedChatClient:
    """Answers each call with the next scripted reply, recording every request it receives.

    A reply may be text, an exception to raise, or a function of the request.
    When the script runs out the last reply repeats.  Usage is estimated with
    the character tokenizer and labelled so, unless ``report_usage=False``, in
    which case it is ``None`` (the provider reported nothing).
    """

    def __init__(self, replies: Iterable[Reply], *, report_usage: bool = True) -> None:
        self.replies = list(replies)
        if not self.replies:
            raise ValueError("ScriptedChatClient needs at least one reply")
        self.requests: list[list[Message]] = []
        self.report_usage = report_usage
        self._tokenizer = CharacterEstimatorTokenizer()

    async def get_response(self, messages: Sequence[Message]) -> ChatResponse:
        self.requests.append(list(messages))
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        if isinstance(reply, BaseException):
            raise reply
        text = reply(messages) if callable(reply) else reply
        usage = None
        if self.report_usage:
            usage = Usage(
                input_tokens=sum(self._tokenizer.count_messages(list(messages))),
                output_tokens=self._tokenizer.count_text(text),
                is_estimate=True,
            )
        return ChatResponse(text=text, messages=(Message.assistant(text),), usage=usage)
