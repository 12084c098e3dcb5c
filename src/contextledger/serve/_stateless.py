"""Stateless mode, once for every API: read the body, refuse what the provider would refuse,
compact, forward, answer.

A stateless client sends its whole history on every request and the proxy keeps nothing of it.
The steps are the same on chat completions, the Responses API and the Messages API, and they are
written here once, in call order, so that a rule added to one step holds on every endpoint:

1. **read** (the API's :meth:`StatelessFormat.read_body`): the body's array (``messages`` or
   ``input``) read apart as its items' bytes where it can be, each item seen before looked up
   rather than read again (:class:`~contextledger.serve._requests.MessageReader`), the body's
   other fields checked;
2. **refuse**, before the upstream is called: a conversation a model would refuse (a tool result
   without its call, a call without its results) and a body that breaks one of the API's
   structural rules, as the provider documents them (:func:`contextledger.messages.problems_for`),
   is a 400 in the API's own error shape, naming the rule and where; a body that continues an
   earlier one is checked for what it adds;
3. **compact** with the proxy's strategy; where the API requires its conversations to open with
   the user, a cut that would leave the assistant first moves to a user message
   (:func:`~contextledger.compaction.opened_by_user`);
4. **forward** what the API writes of it (:meth:`StatelessFormat.outgoing`: the client's own bytes
   for every item kept, its cache breakpoints or key), streamed or not;
5. **answer** with the upstream's reply as it came, counted by the cost meter, and say what was
   done in :data:`COMPACTION_HEADER`.

What the messages of a body make (steps 2 and 3) is kept with the body (its
:class:`~contextledger.serve._bodies.BodyMemo`) for the same messages again, so a retry or a
second sample is not compacted twice.  Each API keeps only what is its own: how its items read
and write, its structural rules, its stream.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from starlette.requests import Request
from starlette.responses import Response

from contextledger._upstream_tracing import UpstreamCallTrace
from contextledger.compaction import CompactionResult, CompactionStrategy, compact_with_report, opened_by_user
from contextledger.exceptions import ProxyError
from contextledger.messages import Message, problems_for
from contextledger.messages._rules import item_rules
from contextledger.serve._bodies import BodyMemo, Compacted, item_values
from contextledger.serve._metrics import Metrics
from contextledger.serve._overflow import harder, overflow_budget, retried_said, too_long
from contextledger.serve._relay import Relay
from contextledger.serve._requests import RawInput, rules_refusal
from contextledger.serve._upstream import Answer, Upstream, passed_back
from contextledger.serve._usage import CostMeter
from contextledger.tokenizers import Tokenizer

__all__ = ["COMPACTION_HEADER", "Outgoing", "StatelessBody", "StatelessFlow", "StatelessFormat", "compaction_said"]

COMPACTION_HEADER = "X-Contextledger-Compaction"
"""The answer header saying what the proxy did to the request: ``compacted``, ``unchanged``, or
``skipped; WHY`` where it did not read the request to cut it (the Responses API's upstream state)."""


def compaction_said(compacted: bool) -> dict[str, str]:
    """The header for a request the proxy read: whether what it sends is less than it was given."""
    return {COMPACTION_HEADER: "compacted" if compacted else "unchanged"}


@dataclass(slots=True)
class StatelessBody:
    """A stateless request as read: its ``payload`` (with the array left empty when the array was
    read apart), the ``messages`` made of the array (None when the proxy does not read it: the
    upstream holds the conversation, or there is nothing to cut) and the ``body`` as it came.

    Read apart, the array's ``items`` are their bytes, ``raw`` what reading them gave (where an
    item may make several messages) and ``memo`` the body's; read whole, ``values`` are the items
    and ``spans`` the slice of them each message came from, where the API needs them to write
    what is kept; ``before``: the memo of the body this one continues, if any.  ``said``: headers
    telling the client what the proxy did."""

    payload: dict[str, Any]
    messages: list[Message] | None
    body: bytes
    items: list[bytes] | None = None
    raw: RawInput | None = None
    memo: BodyMemo | None = None
    before: BodyMemo | None = None  # the memo of the body this one continues
    values: list[Any] | None = None
    spans: list[tuple[int, int]] | None = None
    said: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What goes upstream: the ``payload`` as sent (for the cost meter), its ``body`` bytes, the
    ``messages`` it holds, the headers telling the client what the proxy did, and whether usage
    in a stream was asked for by the proxy (and is then the proxy's to keep)."""

    payload: dict[str, Any]
    body: bytes
    messages: Sequence[Message]
    said: dict[str, str]
    hide_usage: bool = False


class StatelessFormat(Protocol):
    """An API as stateless mode needs it (see the module docstring)."""

    relay: Relay
    upstream: Upstream
    opens_with_user: bool  # whether the API refuses a conversation another role opens
    rules: Literal["chat", "responses", "anthropic"]  # whose structural rules its bodies keep

    def read_body(self, body: bytes) -> StatelessBody:
        """The request read, or a 400 in this API's terms."""
        ...

    def refuse(self, messages: list[Message]) -> None:
        """A 400 when ``messages`` are not a conversation a model takes."""
        ...

    def forwarded(self, read: StatelessBody, result: CompactionResult) -> Any:
        """The items a compaction of a body read apart keeps, as they go upstream (their bytes)."""
        ...

    def outgoing(self, read: StatelessBody, made: Compacted[Any] | None, request: Request) -> Outgoing:
        """What goes upstream for ``read`` and what its messages made (None: they were not read)."""
        ...

    def answer(self, upstream: Answer) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The upstream's reply, its message and the fields a session keeps beside it (or 502)."""
        ...


class StatelessFlow:
    """Runs stateless requests for every endpoint (see the module docstring)."""

    def __init__(
        self,
        metrics: Metrics,
        cost: CostMeter,
        strategy: CompactionStrategy | None,
        tokenizer: Tokenizer,
        *,
        overflow_retry: bool = True,
    ) -> None:
        self.metrics = metrics
        self.cost = cost
        self.strategy = strategy
        self.tokenizer = tokenizer
        self.overflow_retry = overflow_retry  # a "too long" refusal compacted harder and sent once more

    async def request(self, form: StatelessFormat, request: Request, body: bytes) -> Response:
        read = form.read_body(body)
        made: Compacted[Any] | None = None
        if read.messages is not None and read.memo is not None:
            made = read.memo.recall(read.messages)  # the same messages again: checked and compacted
        if made is None and read.messages is not None:
            form.refuse(read.messages)
        # Asked again for the same messages too: the body's other fields (a system prompt's cache
        # marks) may differ, and the rules' state kept with the body makes it a lookup.
        self._refuse_broken_rules(form, read)
        # The call's span from here: the compaction that shapes the request is its child.
        traced = form.relay.traced(read.body)
        try:
            if read.messages is not None:
                if made is None:
                    with traced.shaping():
                        made = await self._compacted(form, read)
                    if read.memo is not None:
                        read.memo.keep(read.messages, made)
                if made.result is not None:
                    result = made.result
                    self.metrics.count(self.metrics.tokens_before, "stateless", amount=result.before["included_tokens"])
                    self.metrics.count(self.metrics.tokens_after, "stateless", amount=result.after["included_tokens"])
            out = form.outgoing(read, made, request)
            headers = form.upstream.headers(request.headers)
            said = out.said
            if COMPACTION_HEADER not in said:
                changed = made is not None and made.result is not None and made.result.changed
                said = {**said, **compaction_said(changed)}
        except BaseException as error:
            traced.failed(error, type(error).__name__)
            raise
        try:
            return await self._send(form, out, headers, said, traced)
        except ProxyError as failure:
            retry = await self._overflowed(form, read, made, out, failure, request)
            if retry is None:
                raise
        out, said = retry  # once: a second refusal goes back as it came
        return await self._send(form, out, headers, said, form.relay.traced(out.body))

    async def _send(
        self,
        form: StatelessFormat,
        out: Outgoing,
        headers: dict[str, str],
        said: dict[str, str],
        traced: UpstreamCallTrace,
    ) -> Response:
        if out.payload.get("stream") is True:
            usage = functools.partial(self.cost.answered, self.cost.expect("stateless", out.payload, out.messages))
            response = await form.relay.stream(
                headers, out.body, finish=None, release=None, usage=usage, hide_usage=out.hide_usage, traced=traced
            )
            response.headers.update(said)
            return response
        upstream = await form.relay.call(headers, out.body, traced)
        reply, _, _ = form.answer(upstream)  # one rule in both modes: a 200 that is no reply is the upstream's fault
        return Response(
            upstream.content,
            status_code=upstream.status_code,
            media_type=upstream.headers.get("content-type", "application/json"),
            headers={**passed_back(upstream.headers), **said},
            background=self.cost.after_answer("stateless", out.payload, out.messages, reply.get("usage"), reply=reply),
        )

    async def _overflowed(
        self,
        form: StatelessFormat,
        read: StatelessBody,
        made: Compacted[Any] | None,
        out: Outgoing,
        failure: ProxyError,
        request: Request,
    ) -> tuple[Outgoing, dict[str, str]] | None:
        """What to send again for a request the upstream refused as too long, and the headers saying
        so; ``None`` when the refusal is another, or nothing can be cut (``_overflow.py``)."""
        refused = too_long(failure)
        if refused is None or not self.overflow_retry or self.strategy is None or read.messages is None:
            return None
        compacted = made is not None and made.result is not None and made.result.changed
        messages = made.result.messages if made is not None and made.result is not None and compacted else read.messages
        sent = sum(self.tokenizer.count_messages(list(out.messages)))
        budget = overflow_budget(refused, sent)
        # What the strategy cannot cut (a system prompt the API keeps apart) is left out of its budget.
        fixed = sent - sum(self.tokenizer.count_messages(messages))
        if budget - fixed < 1:
            return None
        within = harder(self.strategy, self.tokenizer, budget - fixed)
        result = await compact_with_report(read.messages, strategy=within, tokenizer=self.tokenizer)
        if not result.changed or result.after["included_tokens"] >= sent - fixed:
            return None
        if form.opens_with_user:
            opened = opened_by_user(result.messages, read.messages, tokenizer=self.tokenizer)
            if opened is not None:
                result = dataclasses.replace(result, messages=opened)
        made = Compacted(result, form.forwarded(read, result) if read.items is not None else None)
        again = form.outgoing(read, made, request)
        return again, {**again.said, COMPACTION_HEADER: retried_said(refused, budget)}

    def _refuse_broken_rules(self, form: StatelessFormat, read: StatelessBody) -> None:
        """A 400 naming the first of the API's structural rules the body breaks, before the
        upstream is called.  A body read apart is checked for the items it adds to the body it
        continues, from the rules' state kept with that body."""
        if read.items is None:
            problems = problems_for(form.rules, read.payload)
        else:
            count, checker = 0, None
            for memo in (read.memo, read.before):
                kept = memo.rules if memo is not None else None
                if kept is not None and kept[0] <= len(read.items):
                    count, checker = kept
                    break
            if checker is None or count < len(read.items):
                checker = item_rules(form.rules) if checker is None else checker.copy()
                values = read.raw.values if read.raw is not None else None
                checker.feed(values[count:] if values is not None else item_values(read.items[count:]))
                if read.memo is not None:
                    read.memo.rules = (len(read.items), checker)
            problems = checker.problems(read.payload)
        if problems:
            raise rules_refusal(form.rules, problems)

    async def _compacted(self, form: StatelessFormat, read: StatelessBody) -> Compacted[Any]:
        """The strategy's compaction of the body's messages, and what of it is forwarded as the
        client's bytes (a body read apart, and changed by the strategy)."""
        messages = read.messages
        if self.strategy is None or messages is None:
            return Compacted(None, None)
        result = await compact_with_report(messages, strategy=self.strategy, tokenizer=self.tokenizer)
        if not result.changed:
            return Compacted(result, None)
        if form.opens_with_user:
            opened = opened_by_user(result.messages, messages, tokenizer=self.tokenizer)
            if opened is not None:  # the cut left the assistant first: it moves to a user message
                after = {**result.after, "included_tokens": sum(self.tokenizer.count_messages(opened))}
                result = dataclasses.replace(result, messages=opened, after=after)
        return Compacted(result, form.forwarded(read, result) if read.items is not None else None)
