"""The model's own controls over compaction: references to what was set aside, and getting it back.

A request view never deletes: a collapsed tool result or an excluded exchange stays in the stored
history, and only the request leaves it out.  With ``agent_tools=True`` a
:class:`~contextledger.agents.CompactionProvider` lets the model reach it: every collapsed line and
every notice of messages set aside carries a reference, ``ref="..."``, and the model may call
``recall_context(ref, query?)`` to read that group as stored (with a query, only the parts of it
that best match the query's words), or ``compact_context(note?)`` to have the request compacted
now.

A reference is derived from the content of what it names (a digest of its messages), so the line
that carries it reads the same on every request and the cached prefix survives.  The session keeps
where each reference it handed out points (positions in the stored conversation and the shape of
the messages there, never their text: a ``forget`` must leave no copy behind), so recall reads the
stored history as it is now: rewritten by a forget, it returns the rewritten text; reduced by a
retained-history reduction that removed the messages, it says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from contextledger._forgotten import FORGOTTEN_MARKER, REMOVED_MARKER
from contextledger.agents._view import RequestView, fingerprint
from contextledger.compaction import CompactionStrategy, GroupKind, MessageGroup, MessageIndex
from contextledger.compaction._apply import resolve_tokenizer
from contextledger.compaction._openings import set_aside_notice
from contextledger.compaction._tool_results import with_reference
from contextledger.messages import FunctionCallContent, FunctionResultContent, Message, TextContent
from contextledger.tokenizers import Tokenizer

__all__ = [
    "COMPACT_DESCRIPTION",
    "COMPACT_TOOL",
    "RECALL_DESCRIPTION",
    "RECALL_LIMIT",
    "RECALL_TOOL",
    "RecallableCompaction",
    "References",
    "annotated_projection",
    "compact_points",
    "compacted_text",
    "matching",
    "recall_text",
    "reference",
    "referenced_projection",
]

RECALL_TOOL = "recall_context"
COMPACT_TOOL = "compact_context"
RECALL_DESCRIPTION = (
    'Read back, as stored, what a ref="..." in a collapsed line or a set-aside notice stands for. '
    "Give a query (the words you are looking for) to get only the messages under that ref closest to it."
)
COMPACT_DESCRIPTION = "Compact this conversation from your next call on; answers with the tokens before and after."
RECALL_LIMIT = 16_000
"""The most characters ``recall_context`` returns of one reference unless told otherwise."""
_TOOL_RESULTS = "tool_results"  # the origin a tool-result collapse gives the lines it writes
_WORD = re.compile(r"[^\W_]+")  # words, split at underscores too: lookup_stock holds "stock"
_KEPT_SHARE = 0.5  # a query keeps the pieces scoring at least this share of the best one
_QUERY_CHARS = 1_000  # what of a query is read: the model's words to look for, not a document
# How a question is asked, not what it asks for: left out of a query, where in a short run of
# exchanges a word like "what" can be as rare as the thing asked about.
_ASKING_WORDS = """a an and are as at be by can could did do does for from had has have how i if in is it its
me my of on or our please should tell that the their there this to us was we were what when where which who
whom whose why will with would you your"""
_ASKING = frozenset(_ASKING_WORDS.split())


def reference(messages: Sequence[Message]) -> str:
    """The reference of a group (or a run of groups): a digest of its messages, the same for the
    same content on every request."""
    digest = hashlib.sha256("\n".join(map(fingerprint, messages)).encode("ascii"))
    return digest.hexdigest()[:12]


def shape(messages: Sequence[Message]) -> str:
    """What a ``forget`` leaves as it was: the roles and the call ids (a scrubbed message keeps both)."""
    parts: list[str] = []
    for message in messages:
        ids = [c.call_id for c in message.contents if isinstance(c, (FunctionCallContent, FunctionResultContent))]
        parts.append(f"{message.role}:{','.join(ids)}")
    return hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Issued:
    """Where a reference handed out to the model points: ``count`` messages from ``start`` of the
    stored conversation, with their :func:`shape`."""

    start: int
    count: int
    shape: str

    def to_json(self) -> list[Any]:
        return [self.start, self.count, self.shape]

    @classmethod
    def from_json(cls, value: object) -> Issued | None:
        if (
            isinstance(value, list)
            and len(value) == 3
            and isinstance(value[0], int)
            and isinstance(value[1], int)
            and isinstance(value[2], str)
        ):
            return cls(value[0], value[1], value[2])
        return None


class References:
    """The references handed out to a model, and where each points.

    An agent keeps them in the session's state (JSON), so a restored session recalls what its
    model was shown; an adapter with no session of its own keeps them in memory (``most`` bounds
    how many, the oldest forgotten first).  Digests are cached per message object in ``cache``, so
    a long history is not hashed again on every call."""

    def __init__(
        self, state: dict[str, Any] | None = None, cache: dict[str, Any] | None = None, *, most: int = 0
    ) -> None:
        self._issued: dict[str, Any] = {} if state is None else state
        self._digests: dict[tuple[int, int, int], tuple[Message, Message, str]] = (
            {} if cache is None else cache.setdefault("digests", {})
        )
        self._most = most
        # A collapsed line already written with its reference, by the line the strategy wrote:
        # a long session has thousands, and each call would otherwise write them all again.
        self._lines: dict[int, tuple[Message, int, Message]] = {} if cache is None else cache.setdefault("lines", {})

    def referenced_line(self, line: Message, originals: Sequence[Message], start: int) -> Message:
        """``line`` (a strategy's collapsed line for ``originals``, stored from ``start``) with
        the reference of ``originals``."""
        known = self._lines.get(id(line))
        if known is not None and known[0] is line and known[1] == start:
            return known[2]
        ref = self.issue(originals, start)
        written = dataclasses.replace(line, contents=(TextContent(with_reference(line.text, ref)),))
        if self._most and len(self._lines) > 4 * self._most:
            self._lines.clear()
        self._lines[id(line)] = (line, start, written)
        return written

    def issue(self, messages: Sequence[Message], start: int) -> str:
        """The reference of ``messages`` (the stored conversation's, from ``start``), noted as issued."""
        key = (id(messages[0]), id(messages[-1]), len(messages))
        known = self._digests.get(key)
        if known is not None and known[0] is messages[0] and known[1] is messages[-1]:
            ref = known[2]
        else:
            ref = reference(messages)
            self._digests[key] = (messages[0], messages[-1], ref)
        issued = Issued(start, len(messages), shape(messages)).to_json()
        if self._issued.get(ref) != issued:
            self._issued[ref] = issued
            if self._most and len(self._issued) > self._most:
                del self._issued[next(iter(self._issued))]
        if self._most and len(self._digests) > 4 * self._most:
            self._digests.clear()
        return ref

    def find(self, ref: str) -> Issued | None:
        return Issued.from_json(self._issued.get(ref))


def locate(conversation: Sequence[Message], ref: str, issued: Issued) -> list[Message] | None:
    """The messages ``ref`` names in the stored conversation as it is now, or None if they are gone.

    Where they were, unchanged or rewritten by a forget (same roles and call ids, a forget marker
    in place of what changed); else anywhere, unchanged (a reduction moved them); else nowhere."""
    start, count = issued.start, issued.count
    there = list(conversation[start : start + count])
    if len(there) == count:
        if reference(there) == ref:
            return there
        if shape(there) == issued.shape and any(
            FORGOTTEN_MARKER in text or REMOVED_MARKER in text for message in there for text in message.payload_texts()
        ):
            return there
    prints = [fingerprint(message) for message in conversation]
    for at in range(len(conversation) - count + 1):
        joined = "\n".join(prints[at : at + count])
        if hashlib.sha256(joined.encode("ascii")).hexdigest()[:12] == ref:
            return list(conversation[at : at + count])
    return None


def _pieces(messages: Sequence[Message]) -> list[list[Message]]:
    """The recalled messages in the pieces a query picks from: exchanges, each user message with
    what followed it up to the next one, so a call never comes back without its result, nor an
    answer without what it answered."""
    pieces: list[list[Message]] = []
    for message in messages:
        if message.role != "user" and pieces:
            pieces[-1].append(message)
        else:
            pieces.append([message])
    return pieces


def _stem(word: str) -> str:
    """``word`` lowercased and without a common inflection, so that "pushing" finds "push" and
    "review" finds "reviews"; a stem keeps at least three letters."""
    word = word.lower()
    for ending in ("ing", "ed", "es", "s"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word


def _words(messages: Sequence[Message]) -> set[str]:
    return {_stem(word) for message in messages for text in message.payload_texts() for word in _WORD.findall(text)}


def matching(messages: Sequence[Message], query: str) -> list[Message]:
    """The pieces of ``messages`` that best match ``query``'s words, in stored order.

    Each query word a piece holds (both without their inflections) counts by how rare it is among
    the pieces, so what the query names outweighs how it is phrased; the words that only ask
    ("what", "is", "the") are left out, and only the query's first thousand characters are read.
    The pieces scoring at least half of the best are kept; no word of the query anywhere: none."""
    pieces = _pieces(messages)
    held = [_words(piece) for piece in pieces]
    asked = {_stem(word) for word in _WORD.findall(query[:_QUERY_CHARS]) if word.lower() not in _ASKING}
    spread = {word: sum(word in words for words in held) for word in asked}
    weight = {word: math.log((1 + len(pieces)) / count) for word, count in spread.items() if count}
    scores = [sum(weight.get(word, 0.0) for word in asked & words) for words in held]
    best = max(scores, default=0.0)
    if best <= 0:
        return []
    return [message for piece, score in zip(pieces, scores) if score >= _KEPT_SHARE * best for message in piece]


def recall_text(
    ref: str, conversation: Sequence[Message], references: References, limit: int, query: str | None = None
) -> str:
    """``recall_context``'s answer: what ``ref`` stands for in ``conversation`` (the stored
    messages as they are now; with a ``query``, only those that best match it), or an error
    result that says why not."""
    wanted = ref.strip().strip('"')
    issued = references.find(wanted)
    if issued is None:
        return (
            f'Error: ref="{wanted}" names nothing this conversation set aside: no collapsed line or notice '
            "carried it. Use a ref exactly as it is written there."
        )
    found = locate(conversation, wanted, issued)
    if found is None:
        return (
            f'Error: ref="{wanted}" named {issued.count} message(s) that are no longer in the stored history: '
            "a retained-history reduction removed them, so they cannot be recalled."
        )
    asked = query.strip() if isinstance(query, str) else ""
    if not asked:
        return render_recalled(wanted, found, limit)
    kept = matching(found, asked)
    if not kept:
        return (
            f'[recalled ref="{wanted}": none of its {len(found)} message(s) holds a word of the query {asked!r}; '
            "recall it without a query to read them all]"
        )
    return render_recalled(wanted, kept, limit, of=len(found), query=asked)


def compacted_text(strategy: CompactionStrategy, before: int, index: MessageIndex, note: str | None) -> str:
    """``compact_context``'s answer, once ``strategy`` was forced on ``index`` (``before``: the
    tokens it held before)."""
    after = index.included_tokens
    estimate = " (estimated)" if index.tokenizer.is_estimate else ""
    said = f" Note: {note.strip()}." if isinstance(note, str) and note.strip() else ""
    if after >= before:
        return (
            f"Nothing to compact: {strategy.name} found nothing it may set aside; the conversation stays at "
            f"{before} tokens{estimate}.{said}"
        )
    return (
        f"Compacted with {strategy.name}: the conversation sent goes from {before} to {after} tokens{estimate} "
        f"from the next call on; what was set aside carries a ref for recall_context.{said}"
    )


def render_recalled(
    ref: str, messages: Sequence[Message], limit: int, *, of: int | None = None, query: str | None = None
) -> str:
    """The recalled messages as text the model reads, within ``limit`` characters (said so, and
    cut with a marker, beyond it); ``of`` and ``query`` say that a query chose them among ``of``."""
    names = {c.call_id: c.name for m in messages for c in m.contents if isinstance(c, FunctionCallContent)}
    lines: list[str] = []
    for message in messages:
        for content in message.contents:
            if isinstance(content, FunctionCallContent):
                lines.append(f"{message.role} called {content.name}({content.arguments}) [call {content.call_id}]")
            elif isinstance(content, FunctionResultContent):
                name = names.get(content.call_id, "a tool")
                lines.append(f"tool result of {name} [call {content.call_id}]:\n{content.result}")
        if message.text:
            lines.append(f"{message.role}: {message.text}")
    body = "\n".join(lines)
    count = len(messages)
    plural = "s" if (of if of is not None else count) != 1 else ""
    if of is not None and query is not None:
        head = f'[recalled ref="{ref}": {count} of its {of} message{plural} as stored, the ones closest to {query!r}]'
    else:
        head = f'[recalled ref="{ref}": {count} message{plural} as stored]'
    if len(body) <= limit:
        return f"{head}\n{body}"
    left = len(body) - limit
    return (
        f"{head[:-1]}, cut at {limit} of {len(body)} characters]\n{body[:limit]}\n"
        f"[... cut here: {left} more characters; recall_context returns at most {limit}]"
    )


def _positions(view: RequestView) -> Iterator[tuple[MessageGroup, int | None]]:
    """Each group of the view's index with its position in the stored conversation (None for a
    group a strategy wrote, and negative for the providers' context messages)."""
    position = -len(view.context)  # in the index, whose conversation part starts after the frozen prefix
    frozen = view.frozen_count
    for group in view.index.groups:
        if group.kind is GroupKind.SUMMARY and group.replaces:
            yield group, None
            continue
        yield group, position if position < 0 else position + frozen
        position += group.message_count


def annotated_projection(
    view: RequestView, messages: Sequence[Message], base: int, references: References
) -> list[Message]:
    """The view's projection with references: each collapsed tool result's line carries the
    reference of its group, and a notice carrying the reference of a run of messages set aside
    stands where the run was (the frozen prefix included).  Everything else is as projected.
    ``messages[base:]`` is the stored conversation the view was brought up to."""
    groups = list(_positions(view))
    start_of: dict[int, int] = {id(group): at for group, at in groups if at is not None}
    stands_in = {id(original) for group, at in groups if at is None and group.included for original in group.replaces}
    out: list[Message] = []
    run_start: int | None = 0 if view.frozen_count else None
    run_end = view.frozen_count

    def close() -> None:
        nonlocal run_start
        if run_start is not None and run_end > run_start:
            run = messages[base + run_start : base + run_end]  # a slice copies only the run
            ref = references.issue(run, run_start)
            out.append(set_aside_notice(sum(1 for m in run if m.role != "system"), ref=ref))
        run_start = None

    for group, at in groups:
        if at is None:  # a line a strategy wrote
            if group.excluded:
                continue
            close()
            message = group.messages[0]
            originals = group.replaces
            if group.origin == _TOOL_RESULTS and len(originals) == 1 and id(originals[0]) in start_of:
                begin = start_of[id(originals[0])]
                if begin >= 0:
                    message = references.referenced_line(message, originals[0].messages, begin)
            out.append(message)
            continue
        if group.included:
            if at >= 0:  # a provider's context message comes before the conversation and its notices
                close()
            out.extend(group.messages)
            continue
        if id(group) in stands_in or at < 0:
            continue  # a live line stands for it, or a provider's context message: nothing to recall
        if run_start is None:
            run_start = at
        run_end = at + group.message_count
    close()
    return out


def referenced_projection(index: MessageIndex, references: References) -> list[Message]:
    """:func:`annotated_projection` for an index over a whole conversation (no provider context, no
    frozen prefix): what an adapter that compacts each request afresh sends."""
    return annotated_projection(RequestView(index, []), index.source_messages, 0, references)


class RecallableCompaction:
    """A strategy applied afresh to a whole conversation on each request, with the model's own
    controls: what adapters use, whose framework keeps the conversation and calls the model.

    :meth:`request` returns what to send (references on collapsed lines and notices);
    :meth:`recall` and :meth:`compact` answer the model's ``recall_context`` and
    ``compact_context``.  Nothing is kept between requests but the references handed out (in
    memory, at most ``most``): where the model asked to compact is read from the conversation
    itself (the result of its ``compact_context`` call), and the strategy is forced again at that
    point on every later request, so the compaction it asked for holds and later calls follow the
    trigger as usual.
    """

    def __init__(
        self,
        strategy: CompactionStrategy,
        *,
        tokenizer: Tokenizer | None = None,
        recall_limit: int = RECALL_LIMIT,
        most: int = 4096,
    ) -> None:
        self.strategy = strategy
        self.tokenizer = resolve_tokenizer(strategy, tokenizer)
        self.recall_limit = recall_limit
        self.references = References(most=most)

    async def _index(self, messages: Sequence[Message]) -> MessageIndex:
        """``messages`` compacted: forced where the model asked (each ``compact_context`` result
        marks the boundary it was asked at), then as the trigger says."""
        index = MessageIndex(tokenizer=self.tokenizer)
        for point in compact_points(messages):
            index.update(messages[:point])
            await self.strategy.compact(index, force=True)
        index.update(messages)
        await self.strategy.compact(index)
        return index

    async def request(self, messages: Sequence[Message]) -> list[Message]:
        """What to send for ``messages`` (the whole conversation, system messages included)."""
        return referenced_projection(await self._index(messages), self.references)

    async def recall(self, ref: str, messages: Sequence[Message], query: str | None = None) -> str:
        """``recall_context(ref, query?)`` over the conversation as the framework holds it now."""
        return recall_text(ref, messages, self.references, self.recall_limit, query)

    async def compact(self, messages: Sequence[Message], note: str | None = None) -> str:
        """``compact_context(note)`` asked with ``messages`` as they stand (the call that asks
        included, its result not yet): the figures of the next request."""
        index = await self._index(messages)
        before = index.included_tokens
        await self.strategy.compact(index, force=True)
        return compacted_text(self.strategy, before, index, note)


def compact_points(messages: Sequence[Message]) -> list[int]:
    """Where the model asked to compact: the position of each ``compact_context`` result."""
    asked: set[str] = set()
    points: list[int] = []
    for position, message in enumerate(messages):
        for content in message.contents:
            if isinstance(content, FunctionCallContent) and content.name == COMPACT_TOOL:
                asked.add(content.call_id)
            elif (
                isinstance(content, FunctionResultContent)
                and content.call_id in asked
                and (not points or points[-1] != position)
            ):
                points.append(position)
    return points
