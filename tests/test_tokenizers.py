"""Tests for token counting: the labelled character estimate, exact offline OpenAI counts, and memoisation.

Budgets are only as good as the counts behind them.  The estimate is checked against its documented
arithmetic to the token; the exact tokenizer is checked against tiktoken built from OpenAI's own
vocabulary files (shipped inside the ``bpe-openai`` wheel, verified by OpenAI's published hashes), so
nothing is downloaded and a mismatch on any text in the corpus is a real counting error.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import json
import math
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger import (
    CharacterEstimatorTokenizer,
    ConfigurationError,
    FunctionCallContent,
    Message,
    OpenAITokenizer,
    Tokenizer,
    TokenizerUnavailableError,
    from_openai,
    get_tokenizer,
)
from contextledger.messages._message import set_token_memo
from tests.optional_imports import try_import
from tests.sizes import examples

with try_import("dev") as dev_extra:
    import tiktoken
    import tiktoken.load

pytestmark = dev_extra.skip

ENCODINGS = ("cl100k_base", "o200k_base")

# From tiktoken_ext/openai_public.py: the split patterns, special tokens and the sha256 of each vocabulary
# file as OpenAI publishes it.  The hashes prove the offline files are the ones tiktoken would download.
_ENDOFTEXT = "<|endoftext|>"
_ENDOFPROMPT = "<|endofprompt|>"
ENCODING_DEFINITIONS: dict[str, dict[str, Any]] = {
    "cl100k_base": {
        "pat_str": (
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
            r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
        ),
        "special_tokens": {
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
        "sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    },
    "o200k_base": {
        "pat_str": "|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        "special_tokens": {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
        "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    },
}

CORPUS: dict[str, str] = {
    "empty": "",
    "english": "The quick brown fox jumps over the lazy dog. It's 5:30pm; don't forget the milk!",
    "shouting_contractions": "I'LL SEE YOU'RE THERE, WE'VE SAID THEY'D COME",
    "numbers": "1 22 333 4444 55555 3.14159 1,000,000 2024-06-01T12:00:00Z",
    "code": (
        "def fib(n: int) -> int:\n"
        '    """Return the n-th Fibonacci number."""\n'
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n"
        "if __name__ == '__main__':\n\tprint([fib(i) for i in range(10)])\n"
    ),
    "json": json.dumps(
        {"city": "Oslo", "temp_c": 18.5, "tags": ["rain", "wind"], "nested": {"ok": True, "none": None}}
    ),
    "json_with_escapes": '{"q": "say \\"hi\\"\\n", "path": "C:\\\\tmp\\\\x", "unicode": "\\u00e9"}',
    "japanese": "東京の天気は晴れです。明日は雨が降るでしょう。カタカナとひらがなも混ぜます。",
    "emoji": "🎉🧠 👩‍💻 🇳🇴🇯🇵 thumbs 👍🏽 family 👨‍👩‍👧‍👦",
    "whitespace_runs": "a    b\t\t\tc\n\n\n\nd   \n  \r\n e     ",
    "only_spaces": " " * 37,
    "only_newlines": "\n" * 12,
    "trailing_space": "ends with spaces   ",
    "mixed_scripts": "Привет мир, مرحبا بالعالم, नमस्ते दुनिया, 안녕하세요 세계, Γειά σου κόσμε",
    "decomposed_accents": "cafe\u0301 nin\u0303o re\u0301sume\u0301",
    "special_token_text": "before <|endoftext|> after <|fim_prefix|><|endofprompt|> end",
    "url": "https://example.com/a/b?q=1&lang=en#frag",
    "long_repetition": "abc " * 2000,
    "long_single_word": "x" * 3000,
}


# ---------------------------------------------------------------------------------------------
# Reference tokenizer: tiktoken built offline from the bpe-openai vocabulary files
# ---------------------------------------------------------------------------------------------


def _vocabulary_file(encoding: str) -> Path:
    """The gzipped vocabulary inside the bpe-openai wheel, located without importing that package."""
    spec = importlib.util.find_spec("bpe_openai")
    assert spec is not None, "the bpe-openai package is required for these tests"
    assert spec.origin is not None
    return Path(spec.origin).parent / "data" / f"{encoding}.tiktoken.gz"


def _offline_encoding(encoding: str) -> tiktoken.Encoding:
    definition = ENCODING_DEFINITIONS[encoding]
    raw = gzip.decompress(_vocabulary_file(encoding).read_bytes())
    assert hashlib.sha256(raw).hexdigest() == definition["sha256"], f"{encoding} vocabulary is not OpenAI's"
    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return tiktoken.Encoding(
        name=encoding,
        pat_str=definition["pat_str"],
        mergeable_ranks=ranks,
        special_tokens=definition["special_tokens"],
    )


def _no_download(blobpath: str) -> bytes:
    raise AssertionError(f"tiktoken tried to fetch {blobpath}; these tests must run offline")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tiktoken.Encoding]]:
    """tiktoken encodings with every download path disabled and an empty cache directory.

    If anything (tiktoken, or the tokenizer under test) needed the network or a cached vocabulary,
    it would fail here or leave files in the cache directory.
    """
    with pytest.MonkeyPatch.context() as patch:
        cache = tmp_path_factory.mktemp("tiktoken-cache")
        patch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
        patch.setenv("DATA_GYM_CACHE_DIR", str(cache))
        patch.setattr(tiktoken.load, "read_file", _no_download)
        yield {name: _offline_encoding(name) for name in ENCODINGS}
        assert list(cache.iterdir()) == []


@pytest.fixture(scope="module")
def exact(reference: dict[str, tiktoken.Encoding]) -> dict[str, OpenAITokenizer]:
    """The tokenizers under test, built while downloads are disabled (hence the dependency on `reference`)."""
    return {name: OpenAITokenizer(name) for name in ENCODINGS}


def reference_count(encoding: tiktoken.Encoding, text: str) -> int:
    """Special-token text in a message is ordinary text to the API, so it is counted as such."""
    return len(encoding.encode_ordinary(text))


# ---------------------------------------------------------------------------------------------
# CharacterEstimatorTokenizer
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("length", "tokens"), [(0, 0), (1, 1), (3, 1), (4, 1), (5, 2), (8, 2), (9, 3)])
def test_estimate_count_text_rounds_up_per_four_characters(length: int, tokens: int) -> None:
    """Rounding down would let a budget be exceeded by a few characters per message."""
    assert CharacterEstimatorTokenizer().count_text("x" * length) == tokens


def test_estimate_is_labelled_as_an_estimate() -> None:
    """Every count shown to users is tagged with this, so it must never claim to be exact."""
    tokenizer = CharacterEstimatorTokenizer()
    assert tokenizer.is_estimate is True
    assert tokenizer.name == "estimate/4"
    assert CharacterEstimatorTokenizer(8).name == "estimate/8"
    assert isinstance(tokenizer, Tokenizer)


def _estimate_cases() -> dict[str, tuple[Callable[[], Message], int]]:
    """Messages and their estimated counts, worked out by hand from framing + ceil(payload / 4)."""
    return {
        "empty_user": (lambda: Message.user(""), 3),
        "user_4_chars": (lambda: Message.user("abcd"), 3 + 1),
        "user_5_chars": (lambda: Message.user("abcde"), 3 + 2),
        # The name's own characters count with the payload (4 + 3 = 7 -> 2 tokens), plus one for the name.
        "author_name_adds_its_tokens_and_one": (lambda: Message.user("abcd", author_name="bob"), 3 + 1 + 2),
        "empty_author_name_adds_nothing": (lambda: Message.user("abcd", author_name=""), 3 + 1),
        # reasoning (6) + text (6) = 12 characters; the ceiling is taken over the whole payload.
        "reasoning_counts": (lambda: Message.assistant("abcdef", reasoning="ghijkl"), 3 + 3),
        "payload_summed_before_rounding": (lambda: Message.assistant("ab", reasoning="cd"), 3 + 1),
        # name "f" (1) + arguments '{"a":1}' (7) = 8 characters, plus 3 for the call.
        "one_call": (lambda: Message.assistant(calls=[FunctionCallContent("c1", "f", '{"a":1}')]), 3 + 3 + 2),
        # two calls: 3 + 3 * 2 framing; "get_weather" (11) + '{"city":"Oslo"}' (15) + "now" + "{}" (5) = 31.
        "two_calls_with_text": (
            lambda: Message.assistant(
                "Checking",
                calls=[
                    FunctionCallContent("c1", "get_weather", '{"city":"Oslo"}'),
                    FunctionCallContent("c2", "now", "{}"),
                ],
            ),
            3 + 6 + math.ceil((8 + 31) / 4),
        ),
        "tool_result": (lambda: Message.tool("c1", "sunny, 18 C"), 3 + 3),
        "named_tool_result": (lambda: Message.tool("c1", "ok", author_name="weather"), 3 + 1 + 3),
        "system": (lambda: Message.system("You are terse."), 3 + 4),
        # Text parts count by their text; an image part carries no text to count.
        "parts": (
            lambda: from_openai(
                [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "abcd"},
                            {"type": "image_url", "image_url": {"url": "https://example.com/a-long-url.png"}},
                            {"type": "text", "text": "efgh", "cache_control": {"type": "ephemeral"}},
                        ],
                    }
                ]
            )[0],
            3 + 2,
        ),
    }


ESTIMATE_CASES = _estimate_cases()


@pytest.mark.parametrize(("build", "expected"), list(ESTIMATE_CASES.values()), ids=list(ESTIMATE_CASES))
def test_estimate_count_message_is_framing_plus_payload(build: Callable[[], Message], expected: int) -> None:
    """Tool names, arguments, results and reasoning are billed too; leaving them out undercounts agents."""
    assert CharacterEstimatorTokenizer().count_message(build()) == expected


def test_estimate_count_messages_matches_count_message() -> None:
    """The batch path used when indexing must give the same numbers as one-by-one counting."""
    tokenizer = CharacterEstimatorTokenizer()
    batch = tokenizer.count_messages([build() for build, _ in ESTIMATE_CASES.values()])
    assert batch == [expected for _, expected in ESTIMATE_CASES.values()]


def test_estimate_counts_afresh_and_leaves_no_memo() -> None:
    """An estimate is a length and a division, cheaper than writing a memo on every message of a
    long history, so none is written; and a memo another tokenizer left does not change it."""
    tokenizer = CharacterEstimatorTokenizer()
    messages = [build() for build, _ in ESTIMATE_CASES.values()]
    expected = [count for _, count in ESTIMATE_CASES.values()]
    assert tokenizer.count_messages(messages) == expected
    assert [m._token_memo for m in messages] == [None] * len(messages)
    for message in messages[::2]:
        set_token_memo(message, ("another tokenizer", 1))
    assert tokenizer.count_messages(messages) == expected
    assert [tokenizer.count_message(m) for m in messages] == expected


@given(text=st.text(max_size=200), per_token=st.integers(1, 9))
def test_estimate_sizes_a_plain_text_message_before_it_exists(text: str, per_token: int) -> None:
    """Compaction sizes a summary from its length alone; writing the message must not change the count."""
    tokenizer = CharacterEstimatorTokenizer(per_token)
    [sized] = tokenizer.count_plain_texts([len(text)])
    assert sized == tokenizer.count_message(Message.assistant(text))
    assert sized == tokenizer.count_message(Message.user(text))


def test_estimate_counts_japanese_by_characters_not_by_json_escapes() -> None:
    """Counting the serialised form would inflate non-ASCII text sixfold (each char becomes \\uXXXX)."""
    japanese = "東京は晴れ、大阪は雨。"
    assert len(japanese) == 11
    tokenizer = CharacterEstimatorTokenizer()
    assert tokenizer.count_text(japanese) == 3
    assert tokenizer.count_message(Message.user(japanese)) == 3 + 3
    assert tokenizer.count_text(json.dumps(japanese)) == 17  # what an escaping implementation would report


def test_estimate_counts_json_arguments_by_characters_not_by_re_escaping() -> None:
    """Tool arguments are already JSON text; escaping them again would count every quote twice."""
    arguments = '{"query": "say \\"hello\\"", "lang": "ja"}'
    assert len(arguments) == 40
    tokenizer = CharacterEstimatorTokenizer()
    assert tokenizer.count_text(arguments) == 10
    message = Message.assistant(calls=[FunctionCallContent("c1", "find", arguments)])
    assert tokenizer.count_message(message) == 3 + 3 + math.ceil((4 + 40) / 4)
    assert tokenizer.count_text(json.dumps(arguments)) > 10  # what double encoding would report


@pytest.mark.parametrize("bad", [0, -1, -4, 2.5, "4", None, True], ids=repr)
def test_estimate_rejects_bad_characters_per_token(bad: Any) -> None:
    """A zero, negative, fractional or non-number ratio would give nonsense budgets or divide by zero."""
    with pytest.raises(ConfigurationError):
        CharacterEstimatorTokenizer(bad)


# ---------------------------------------------------------------------------------------------
# Memoisation
# ---------------------------------------------------------------------------------------------


def test_memo_of_another_tokenizer_is_not_reused(exact: dict[str, OpenAITokenizer]) -> None:
    """A count memoised under one vocabulary is wrong for another, so a different name recounts."""
    message = Message.user("abcdefgh " * 20)
    cl100k = exact["cl100k_base"].count_message(message)
    set_token_memo(message, ("cl100k_base", 999))  # planted: a recount would not return it
    assert exact["cl100k_base"].count_message(message) == 999
    o200k = exact["o200k_base"].count_message(message)
    assert o200k != 999
    assert message._token_memo == ("o200k_base", o200k)
    assert exact["cl100k_base"].count_message(message) == cl100k
    assert CharacterEstimatorTokenizer().count_message(message) == 3 + 45  # the estimate reads no memo


def test_memo_does_not_affect_equality(exact: dict[str, OpenAITokenizer]) -> None:
    """The index compares messages to detect an unchanged prefix; a counted message is still equal."""
    counted = Message.user("same text")
    exact["cl100k_base"].count_message(counted)
    assert counted._token_memo is not None
    assert counted == Message.user("same text")


def test_exact_tokenizer_counts_a_message_once(
    exact: dict[str, OpenAITokenizer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact tokenizer is the expensive one; a second count must not reach the encoder at all."""
    tokenizer = OpenAITokenizer("cl100k_base")
    calls: list[list[str]] = []
    original = tokenizer._batch_count

    def spy(texts: Sequence[str], encoding: str, threads: int) -> list[int]:
        calls.append(list(texts))
        return list(original(texts, encoding, threads))

    monkeypatch.setattr(tokenizer, "_batch_count", spy)
    message = Message.user("hello world")
    first = tokenizer.count_message(message)
    assert len(calls) == 1
    assert message._token_memo == ("cl100k_base", first)
    assert tokenizer.count_message(message) == first
    assert tokenizer.count_messages([message, message]) == [first, first]
    assert len(calls) == 1


def test_exact_and_estimated_counts_do_not_leak_into_each_other(
    exact: dict[str, OpenAITokenizer], reference: dict[str, tiktoken.Encoding]
) -> None:
    """Switching tokenizer on the same history must give each tokenizer its own numbers."""
    text = "東京の天気は晴れです。" * 5
    message = Message.user(text)
    estimate = CharacterEstimatorTokenizer().count_message(message)
    exact_count = exact["cl100k_base"].count_message(message)
    assert exact_count == 3 + reference_count(reference["cl100k_base"], text)
    assert exact_count != estimate
    assert exact["o200k_base"].count_message(message) == 3 + reference_count(reference["o200k_base"], text)
    assert CharacterEstimatorTokenizer().count_message(message) == estimate


# ---------------------------------------------------------------------------------------------
# OpenAITokenizer: exact against tiktoken
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("text", list(CORPUS.values()), ids=list(CORPUS))
def test_exact_count_text_matches_tiktoken(
    exact: dict[str, OpenAITokenizer], reference: dict[str, tiktoken.Encoding], encoding: str, text: str
) -> None:
    """Any difference from OpenAI's own tokenizer is a budget the model will not honour."""
    assert exact[encoding].count_text(text) == reference_count(reference[encoding], text)


_REFERENCE_CACHE: dict[str, tiktoken.Encoding] = {}


def _generated_text_references() -> dict[str, tiktoken.Encoding]:
    """Hypothesis cannot take module fixtures, so the offline encodings are built once and kept here."""
    if not _REFERENCE_CACHE:
        _REFERENCE_CACHE.update({name: _offline_encoding(name) for name in ENCODINGS})
    return _REFERENCE_CACHE


# Code points this Python's Unicode tables leave unassigned (scripts added later, such as
# U+323B0) are classified differently by the two pre-tokenising regex engines, and a count can
# differ by a token there; every assigned character must agree.
@settings(max_examples=examples(300), deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cn")), max_size=300))
def test_exact_count_text_matches_tiktoken_on_generated_text(text: str) -> None:
    """Arbitrary assigned Unicode, not just the hand-picked corpus, must count exactly the same in both encodings."""
    references = _generated_text_references()
    for name in ENCODINGS:
        assert OpenAITokenizer(name).count_text(text) == reference_count(references[name], text)


def _exact_message_cases() -> dict[str, tuple[Callable[[], Message], int, list[str]]]:
    """Messages with their framing and the exact strings the model reads, counted one by one."""
    calls = [
        FunctionCallContent("c1", "get_weather", CORPUS["json"]),
        FunctionCallContent("c2", "search_docs", '{"q": "東京 weather", "limit": 3}'),
    ]
    return {
        "user_english": (lambda: Message.user(CORPUS["english"]), 3, [CORPUS["english"]]),
        "user_named": (lambda: Message.user("hi there", author_name="alice"), 4, ["hi there", "alice"]),
        "system_code": (lambda: Message.system(CORPUS["code"]), 3, [CORPUS["code"]]),
        "assistant_reasoning_text_calls": (
            lambda: Message.assistant("Let me check both.", calls=calls, reasoning=CORPUS["japanese"]),
            3 + 2 * 3,
            [
                CORPUS["japanese"],
                "Let me check both.",
                "get_weather",
                CORPUS["json"],
                "search_docs",
                '{"q": "東京 weather", "limit": 3}',
            ],
        ),
        "tool_json_result": (
            lambda: Message.tool("c1", CORPUS["json_with_escapes"]),
            3,
            [CORPUS["json_with_escapes"]],
        ),
        "tool_emoji_result": (lambda: Message.tool("c2", CORPUS["emoji"]), 3, [CORPUS["emoji"]]),
        "whitespace": (lambda: Message.user(CORPUS["whitespace_runs"]), 3, [CORPUS["whitespace_runs"]]),
        "empty_assistant": (Message.assistant, 3, []),
        "parts_with_image": (
            lambda: from_openai(
                [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Describe:"},
                            {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
                            {"type": "text", "text": " briefly", "cache_control": {"type": "ephemeral"}},
                        ],
                    }
                ]
            )[0],
            3,
            ["Describe:", " briefly"],
        ),
    }


EXACT_MESSAGE_CASES = _exact_message_cases()


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(
    ("build", "framing", "payload"), list(EXACT_MESSAGE_CASES.values()), ids=list(EXACT_MESSAGE_CASES)
)
def test_exact_count_message_is_framing_plus_each_payload_string(
    exact: dict[str, OpenAITokenizer],
    reference: dict[str, tiktoken.Encoding],
    encoding: str,
    build: Callable[[], Message],
    framing: int,
    payload: list[str],
) -> None:
    """Each string is tokenised on its own, as the model sees them in separate fields, never as JSON."""
    expected = framing + sum(reference_count(reference[encoding], text) for text in payload)
    assert exact[encoding].count_message(build()) == expected


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_exact_count_messages_matches_one_by_one(
    exact: dict[str, OpenAITokenizer], reference: dict[str, tiktoken.Encoding], encoding: str
) -> None:
    """The batched path (one call for all new strings) must attribute every count to its own message."""
    cases = list(EXACT_MESSAGE_CASES.values())
    messages = [build() for build, _, _ in cases]
    tokenizer = exact[encoding]
    tokenizer.count_message(messages[2])  # one already memoised, the rest new: both paths in one batch
    expected = [
        framing + sum(reference_count(reference[encoding], text) for text in payload) for _, framing, payload in cases
    ]
    assert tokenizer.count_messages(messages) == expected
    assert tokenizer.count_messages([]) == []


def test_exact_tokenizer_is_labelled_exact(exact: dict[str, OpenAITokenizer]) -> None:
    for name, tokenizer in exact.items():
        assert tokenizer.name == name
        assert tokenizer.is_estimate is False
        assert isinstance(tokenizer, Tokenizer)
    assert OpenAITokenizer().name == "o200k_base"


@pytest.mark.parametrize("encoding", ["p50k_base", "gpt2", "o200k_harmony", "CL100K_BASE", ""])
def test_exact_tokenizer_rejects_unknown_encodings(encoding: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        OpenAITokenizer(encoding)
    assert repr(encoding) in str(caught.value)


def test_exact_tokenizer_without_its_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The core has no dependencies; a missing extra must be a clear, catchable error naming the package."""
    monkeypatch.setitem(sys.modules, "toktok", None)
    with pytest.raises(TokenizerUnavailableError, match=r"pip install 'contextledger\[exact\]'"):
        OpenAITokenizer("cl100k_base")


# ---------------------------------------------------------------------------------------------
# get_tokenizer and import cost
# ---------------------------------------------------------------------------------------------


def test_get_tokenizer_by_name(exact: dict[str, OpenAITokenizer]) -> None:
    estimate = get_tokenizer("estimate")
    assert isinstance(estimate, CharacterEstimatorTokenizer)
    assert estimate.name == "estimate/4"
    for name in ENCODINGS:
        tokenizer = get_tokenizer(name)
        assert isinstance(tokenizer, OpenAITokenizer)
        assert tokenizer.name == name
        assert tokenizer.count_text("hello world") == exact[name].count_text("hello world")


def test_get_tokenizer_rejects_unknown_names() -> None:
    with pytest.raises(ConfigurationError, match="'bogus'"):
        get_tokenizer("bogus")


def _modules_after(code: str) -> list[str]:
    """Which tokenizer packages a fresh interpreter has loaded after running `code`."""
    probe = (
        f"{code}\nimport sys\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('toktok', 'tiktoken', 'bpe_openai')))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded: list[str] = json.loads(result.stdout.strip().replace("'", '"'))
    return loaded


def test_importing_contextledger_does_not_load_a_tokenizer_package() -> None:
    """The core must import fast and without optional extras; the exact tokenizer loads on first use."""
    assert _modules_after("import contextledger") == []
    assert "toktok" in _modules_after("import contextledger\ncontextledger.OpenAITokenizer('cl100k_base')")
