"""Prefix stability (design.md#prefix-stability): a strategy applied afresh to each request of a growing conversation
keeps sending the same start until the conversation has grown by a step, then moves its cut once.

Providers bill a request's prefix that repeats an earlier one at a tenth of the price, so a cut that
moves on every request costs more than it saves.  The property, checked on random conversations in
the shapes real agents send, compacted statelessly at every length a real request can have (one in
which every call has its results: an agent sends the results with the call's next request):

- between two moves, each projection starts with the whole previous one (only new messages follow);
- a trigger/target strategy (trigger ``T`` above target ``t`` on one measure) moves only when the
  history has grown by at least ``T - t`` on that measure: between the request before one move and
  the request of the next, the measure grew by ``T - t`` or more;
- a keyword-style strategy with ``stable_step=k`` moves only after ``k`` more groups became eligible.

Requests where the strategy's floor, not its grid, decided the cut (it took every group its floor
lets go, as the same strategy told to take everything would, or the grid point its measure asks
for lies beyond all of that, so the cut waits on the last whole step that can go) are outside the
promise: as the conversation grows, groups leave the floor and the cut follows them.  They break
the chain of moves.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.compaction import (
    CompactionStrategy,
    GroupKind,
    MessageIndex,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    always,
    compact_with_report,
    messages_exceed,
    never,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)
from contextledger.compaction._base import threshold_of
from contextledger.compaction._triggers import Not
from contextledger.messages import (
    FunctionCallContent,
    FunctionResultContent,
    HostedCallContent,
    HostedResultContent,
    Message,
    ReasoningContent,
)
from contextledger.tokenizers import CharacterEstimatorTokenizer
from tests.conversations import conversations
from tests.sizes import examples

TOKENIZER = CharacterEstimatorTokenizer()


@dataclass(frozen=True)
class Growth:
    """What one strategy did to every prefix of a conversation."""

    measure: list[int]  # the trigger's measure of each whole prefix (before compaction)
    projections: list[list[Message]]
    floor_bound: list[bool]  # the floor decided: everything it lets go went


def grow(
    strategy: CompactionStrategy, everything: CompactionStrategy | None, conversation: Sequence[Message], metric: str
) -> Growth:
    """``everything``: the same strategy and floor, told to take all it may (trigger always, target
    never); None for a keyword-style strategy, whose grid never asks for more than its floor allows
    (though a unit reaching into its floor still may)."""
    measure: list[int] = []
    projections: list[list[Message]] = []
    floor_bound: list[bool] = []
    for length in sendable(conversation):
        request = list(conversation[:length])
        measure.append(getattr(MessageIndex(request, tokenizer=TOKENIZER), metric))
        result = asyncio.run(compact_with_report(request, strategy=strategy, tokenizer=TOKENIZER))
        projections.append(result.messages)
        exhausted = out_of_reach = False
        if everything is not None:
            most = asyncio.run(compact_with_report(request, strategy=everything, tokenizer=TOKENIZER))
            exhausted = result.messages == most.messages
            out_of_reach = grid_out_of_reach(strategy, metric, measure[-1], getattr(most.index, metric))
        bound = bool(result.events) and (exhausted or cut_meets_floor(strategy, result.index))
        floor_bound.append(bound or out_of_reach)
    return Growth(measure, projections, floor_bound)


def grid_out_of_reach(strategy: CompactionStrategy, metric: str, measure: int, least: int) -> bool:
    """Whether the grid point a request's measure asks for lies beyond what the floor lets go
    (``least``: the measure with all of it gone).  The cut then waits on the last whole step that
    can go, and moves once enough has left the floor, which the history's growth does not time."""
    turns = isinstance(strategy, SlidingWindowStrategy)
    trigger = threshold_of(None, strategy.trigger, turns=turns)
    target = threshold_of(strategy.target, strategy.trigger, turns=turns) if strategy.target is not None else None
    if trigger is None or target is None or trigger[0] != metric or target[0] != metric:
        return False
    step = trigger[1] - target[1]
    if step <= 0 or measure <= trigger[1]:
        return False
    return measure - least < -(-(measure - trigger[1]) // step) * step


def cut_meets_floor(strategy: CompactionStrategy, index: MessageIndex) -> bool:
    """Whether the oldest group the strategy kept is one its floor keeps anyway: the newest groups
    (newest turns, for the window) it may not take, with every group of a unit one of them is in.
    There the grid is out of reach, and the cut follows the floor as the conversation grows."""
    groups = [g for g in index.groups if g.kind is not GroupKind.SYSTEM]
    floor = max(getattr(strategy, "minimum_preserved", 1), 1)
    if isinstance(strategy, SlidingWindowStrategy):
        turns = sorted({g.turn for g in groups if g.turn})[-floor:]
        kept = [g for g in groups if g.turn in turns]
    else:
        kept = groups[-floor:]
    closure = {id(m) for g in kept for m in g.unit} | {id(g) for g in kept}
    first = next((g for g in groups if not g.excluded), None)
    return first is not None and id(first) in closure


def sendable(conversation: Sequence[Message]) -> list[int]:
    """The lengths at which the conversation could be sent: no call is waiting for a result, and the
    last message is not reasoning alone (a provider refuses a reasoning item without what follows it)."""
    lengths: list[int] = []
    waiting: set[str] = set()
    for length, message in enumerate(conversation, 1):
        for content in message.contents:
            if isinstance(content, (FunctionCallContent, HostedCallContent)):
                waiting.add(content.call_id)
            elif isinstance(content, (FunctionResultContent, HostedResultContent)):
                waiting.discard(content.call_id)
        reasoning_alone = bool(message.contents) and all(isinstance(c, ReasoningContent) for c in message.contents)
        if not waiting and not reasoning_alone:
            lengths.append(length)
    return lengths


def starts_with(longer: Sequence[Message], shorter: Sequence[Message]) -> bool:
    return len(longer) >= len(shorter) and all(a is b or a == b for a, b in zip(longer, shorter))


def moves(growth: Growth) -> list[int | None]:
    """The requests at which the cut moved (None marks a break in the chain: a floor-bound request)."""
    found: list[int | None] = []
    for n in range(1, len(growth.projections)):
        if growth.floor_bound[n] or growth.floor_bound[n - 1]:
            found.append(None)
        elif not starts_with(growth.projections[n], growth.projections[n - 1]):
            found.append(n)
    return found


def check_steps(growth: Growth, step: int) -> None:
    """Consecutive moves ``a < b`` (no floor-bound request between): the measure grew by ``step``
    or more from the request before ``a`` to the request ``b``."""
    chain = moves(growth)
    for first, second in itertools.pairwise(chain):
        if first is None or second is None:
            continue
        grown = growth.measure[second] - growth.measure[first - 1]
        assert grown >= step, (
            f"the cut moved at request {first} and again at request {second}, after the history grew by "
            f"{grown} (< {step})"
        )


@st.composite
def trigger_target(draw: st.DrawFn) -> tuple[CompactionStrategy, CompactionStrategy, str, int]:
    """A built-in trigger/target strategy, trigger above target on one measure, and the same strategy
    told to take everything its floor allows: (strategy, everything, measure, step)."""
    family = draw(st.sampled_from(["truncation", "truncation_keywords", "window", "collapse", "selective"]))
    low = draw(st.integers(1, 60))
    high = low + draw(st.integers(1, 80))
    floor = draw(st.integers(0, 3))
    strategy: CompactionStrategy
    everything: CompactionStrategy
    if family == "truncation":
        strategy = TruncationStrategy(trigger=tokens_exceed(high), target=tokens_below(low), minimum_preserved=floor)
        everything = TruncationStrategy(trigger=always(), target=never(), minimum_preserved=floor)
    elif family == "truncation_keywords":
        on_tokens = draw(st.booleans())
        if not on_tokens:
            low, high = 1 + low // 10, 2 + high // 10
        strategy = TruncationStrategy(
            max_n=high, compact_to=low, tokenizer=TOKENIZER if on_tokens else None, minimum_preserved=floor
        )
        everything = TruncationStrategy(trigger=always(), target=never(), minimum_preserved=floor)
    elif family == "window":
        low, high = 1 + low // 20, 2 + high // 20
        turns_kept = min(floor, low)
        strategy = SlidingWindowStrategy(
            trigger=turns_exceed(high), target=Not(turns_exceed(low)), minimum_preserved=turns_kept
        )
        everything = SlidingWindowStrategy(trigger=always(), target=never(), minimum_preserved=turns_kept)
    elif family == "collapse":
        strategy = ToolResultCompactionStrategy(trigger=tokens_exceed(high), target=tokens_below(low))
        everything = ToolResultCompactionStrategy(trigger=always(), target=never())
    else:
        strategy = SelectiveToolCallCompactionStrategy(
            trigger=tokens_exceed(high), target=tokens_below(low), minimum_preserved=floor
        )
        everything = SelectiveToolCallCompactionStrategy(trigger=always(), target=never(), minimum_preserved=floor)
    turns = isinstance(strategy, SlidingWindowStrategy)
    trigger = threshold_of(None, strategy.trigger, turns=turns)
    target = threshold_of(strategy.target, strategy.trigger, turns=turns)
    assert trigger is not None
    assert target is not None
    assert trigger[0] == target[0]
    return strategy, everything, trigger[0], trigger[1] - target[1]


@settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(conversation=conversations(max_blocks=30, traffic=True), case=trigger_target())
def test_a_trigger_target_cut_moves_once_per_step_of_growth(
    conversation: list[Message], case: tuple[CompactionStrategy, CompactionStrategy, str, int]
) -> None:
    strategy, everything, metric, step = case
    check_steps(grow(strategy, everything, conversation, metric), step)


@settings(
    max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    # Chat-completions shapes: a keyword-style grid counts groups its floor decides on, and an
    # approval's unit reaching over the floor moves that count (the trigger/target test above
    # draws real traffic, approvals included).
    conversation=conversations(max_blocks=30),
    family=st.sampled_from(["window", "collapse", "selective"]),
    keep=st.integers(1, 3),
    step=st.integers(2, 5),
)
def test_a_keyword_style_strategy_with_a_stable_step_moves_once_per_step_of_groups(
    conversation: list[Message], family: str, keep: int, step: int
) -> None:
    strategy: CompactionStrategy
    if family == "window":
        strategy = SlidingWindowStrategy(keep_last_groups=keep, stable_step=step)
        metric = "included_groups"
    elif family == "collapse":
        strategy = ToolResultCompactionStrategy(keep_last_tool_call_groups=keep, stable_step=step)
        metric = "included_tool_call_groups"
    else:
        strategy = SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=keep, stable_step=step)
        metric = "included_tool_call_groups"
    check_steps(grow(strategy, None, conversation, metric), step)


def test_without_prefix_stability_the_cut_moves_on_every_request() -> None:
    """The property test can fail: the exact rule (the seed's) moves the cut as soon as one message
    more is over the target."""
    conversation = [Message.system("s")]
    for n in range(30):
        conversation += [Message.user(f"question {n} " + "q" * 40), Message.assistant(f"answer {n} " + "a" * 40)]
    everything = TruncationStrategy(trigger=always(), target=never(), minimum_preserved=1)
    exact = TruncationStrategy(
        trigger=messages_exceed(20), target=Not(messages_exceed(10)), minimum_preserved=1, prefix_stable=False
    )
    growth = grow(exact, everything, conversation, "included_messages")
    assert sum(move is not None for move in moves(growth)) > 20
    stable = TruncationStrategy(trigger=messages_exceed(20), target=Not(messages_exceed(10)), minimum_preserved=1)
    growth = grow(stable, everything, conversation, "included_messages")
    assert 0 < sum(move is not None for move in moves(growth)) <= 5
    check_steps(growth, 10)
