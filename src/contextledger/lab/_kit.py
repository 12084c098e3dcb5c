"""compaction-conformance-kit's checks run against every lab policy (the ``kit`` extra).

The kit (``compaction_kit`` on PyPI, pinned to :data:`KIT_VERSION`) plants 20
canaries (safety rules, hard constraints, facts, goal state, user
preferences, written as prose) in generated sessions, compacts each session
five times in a row at a fixed character budget, and counts which canaries
survive the last round and which stale values (a budget cap or a deadline that
a later statement replaced) remain.

Each lab policy becomes a kit compactor: the kit's turns are replayed as a
conversation (its assistant turns as scripted replies, so no model writes
anything), then the policy is asked to send one more request, and that request
— everything the model would read, system message included — is the compacted
text the kit scores (a policy whose model calls a tool first, a recall, has
those rounds' tokens counted apart, as ``tool_round_tokens_estimate``).  A
later round's input is the previous round's text as a single system turn,
exactly as the kit feeds its own compactors.  Policies do
not know the kit's budget: an output over it is reported as such, never cut.

The kit's own reference compactors run beside them on the same sessions, so
every figure has a yardstick; the lab reports the figures and names no winner.

The kit scores text, so a policy whose model can fetch what it set aside (a
recall) scores only what it carries unasked.  The kit's own probe says how a
live agent is probed instead: ask each canary's direct question and grade what
the agent could read.  So each lab policy is also *asked*: the session is
replayed once, each canary's ``direct_question`` is put to the policy as the
next request (on a copy of the session, as the lab's probes are), and the
kit's direct-recall check is run on what the model read before it answered,
recalled text included and the question itself left out.  Every call the
question took is counted in its tokens (one call without a recall, two with
one).  The kit's reference compactors have no model to ask and are not asked.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from contextledger._extras import require_extra
from contextledger.clients import ChatClient
from contextledger.exceptions import FactRejectedError
from contextledger.facts import parse_assertions
from contextledger.lab._calls import MODEL, CallLog, RecordingClient, ToolBox
from contextledger.lab._policies import PolicySetup, get_policy
from contextledger.lab._timeline import Timeline, Turn
from contextledger.tokenizers import CharacterEstimatorTokenizer

__all__ = ["KIT_BUDGET", "KIT_REFERENCES", "KIT_ROUNDS", "KIT_SEEDS", "KIT_VERSION", "run_kit"]

KIT_VERSION = "0.8.0"
KIT_SEEDS = (1, 2, 3, 4)
KIT_ROUNDS = 5
KIT_BUDGET = 0.5
KIT_REFERENCES = (
    "lossy-truncation",
    "naive-summary",
    "summary-plus-tail",
    "pinned-rules",
    "checklist-carrying",
    "update-aware-checklist",
)
NEXT_REQUEST = "Please continue."
_ESTIMATE = CharacterEstimatorTokenizer()


def _kit() -> Any:
    return require_extra("compaction_kit", extra="kit", feature="contextledger lab --kit")


def _declared(text: str) -> dict[str, str]:
    try:
        return {candidate.key: candidate.value for candidate in parse_assertions(text)}
    except FactRejectedError:
        return {}


def _timeline(kit_turns: Sequence[Any]) -> Timeline:
    """The kit's turns as a lab timeline: system text as instructions, each user turn with its scripted reply."""
    instructions = "\n".join(turn.text for turn in kit_turns if turn.role == "system") or "You are an assistant."
    turns: list[Turn] = []
    pending: str | None = None
    replies: list[str] = []

    def close() -> None:
        if pending is not None:
            reply = "\n".join(replies) if replies else None
            turns.append(Turn(len(turns) + 1, pending, _declared(pending), scripted_reply=reply))

    for turn in kit_turns:
        if turn.role == "user":
            close()
            pending, replies = turn.text, []
        elif turn.role in ("assistant", "tool") and pending is not None:
            replies.append(turn.text)
    close()
    return Timeline("compaction-kit", "", instructions, (), tuple(turns), "compaction-kit")


class PolicyCompactor:
    """A lab policy seen through the kit's ``Compactor`` protocol (``compact(turns, round_num, budget_chars)``)."""

    def __init__(self, policy: str, model: Callable[[], ChatClient]) -> None:
        self.name = policy
        self.model = model
        self.extra_tokens = 0  # writer and summariser calls, over every round compacted so far
        self.round_tokens = 0  # the next request's own tool rounds (recalls), over every round

    def compact(self, turns: list[Any], round_num: int = 1, budget_chars: int | None = None) -> Any:
        text = asyncio.run(self._next_request(turns))
        return _kit().CompactedContext(text=text, compactor_name=self.name, round_num=round_num)

    async def _replayed(self, kit_turns: Sequence[Any]) -> tuple[Any, CallLog]:
        """The policy after the kit's session was replayed through it, and the log of its calls."""
        timeline = _timeline(kit_turns)
        log = CallLog()
        model = self.model()
        client = RecordingClient(model, log, MODEL)
        setup = PolicySetup(
            timeline=timeline,
            client=client,
            extra_client=lambda kind: RecordingClient(model, log, kind),
            tools=ToolBox(timeline),
            writer="rules",
        )
        policy = get_policy(self.name).factory(setup)
        for turn in timeline.turns:
            client.scripted_reply = turn.scripted_reply
            try:
                await policy.run_turn(turn)
            finally:
                client.scripted_reply = None
        return policy, log

    async def asked(self, kit_turns: Sequence[Any], questions: Sequence[str]) -> list[tuple[str, int]]:
        """For each question, asked as the next request: what the model read before it answered
        (the question left out) and the tokens of every call the question took."""
        policy, log = await self._replayed(kit_turns)
        log.take()
        answers: list[tuple[str, int]] = []
        for question in questions:
            await policy.ask(question)
            records = log.take()
            tokens = sum(sum(_ESTIMATE.count_messages(record.request)) for record in records)
            calls = [record for record in records if record.kind == MODEL]
            # The question is left out wherever it stands, alone or after a block a provider put in
            # front of it (the facts): its own words must not count as what the context held.
            read = (message.text.replace(question, " ") for message in calls[-1].request)
            answers.append(("\n".join(text for text in read if text.strip()), tokens))
        return answers

    async def _next_request(self, kit_turns: Sequence[Any]) -> str:
        policy, log = await self._replayed(kit_turns)
        earlier = log.take()
        await policy.ask(NEXT_REQUEST)
        asked = log.take()
        for record in [*earlier, *asked]:
            if record.kind != MODEL:
                self.extra_tokens += sum(_ESTIMATE.count_messages(record.request))
        calls = [record for record in asked if record.kind == MODEL]
        # Tool rounds before the request the kit scores (a recall of what was set aside) are paid for.
        for record in calls[:-1]:
            self.round_tokens += sum(_ESTIMATE.count_messages(record.request))
        sent = calls[-1].request
        shown = sent[:-1] if sent and sent[-1].role == "user" and sent[-1].text == NEXT_REQUEST else sent
        return "\n".join(f"[{message.role}] {message.text}" for message in shown if message.text)


def _measure(name: str, kind: str, make: Callable[[], Any], seeds: Sequence[int]) -> dict[str, Any]:
    kit = _kit()
    survived: list[int] = []
    stale: list[int] = []
    final_chars: list[int] = []
    compliant = True
    extra = 0
    rounds = 0
    updates = 0
    for seed in seeds:
        session, canaries = kit.build_random_session(seed)
        compactor = make()
        run = kit.run_conformance(session, compactor, rounds=KIT_ROUNDS, canaries=canaries, budget_fraction=KIT_BUDGET)
        final = run.rounds[-1]
        text = final.context.text.lower()
        survived.append(sum(final.survived.values()))
        updated = [canary for canary in canaries if canary.superseded_tokens]
        updates = len(updated)
        stale.append(sum(any(token.lower() in text for token in c.superseded_tokens) for c in updated))
        final_chars.append(final.output_chars)
        compliant = compliant and all(result.within_budget for result in run.rounds)
        extra += getattr(compactor, "extra_tokens", 0)
        rounds += getattr(compactor, "round_tokens", 0)
    return {
        "name": name,
        "kind": kind,
        "canaries": len(canaries),
        "survived_per_seed": survived,
        "survived_median": statistics.median(survived),
        "updates": updates,
        "stale_per_seed": stale,
        "stale_total": sum(stale),
        "within_budget": compliant,
        "final_chars_median": statistics.median(final_chars),
        "final_tokens_estimate_median": statistics.median(chars // 4 for chars in final_chars),
        "extra_tokens_estimate": extra,
        "tool_round_tokens_estimate": rounds,
    }


def _measure_asked(name: str, model: Callable[[], ChatClient], seeds: Sequence[int]) -> dict[str, Any]:
    """The policy asked each canary's direct question (see the module docstring)."""
    kit = _kit()
    probe = kit.DirectRecallProbe()
    survived: list[int] = []
    stale: list[int] = []
    tokens: list[int] = []
    for seed in seeds:
        session, canaries = kit.build_random_session(seed)
        answers = asyncio.run(
            PolicyCompactor(name, model).asked(list(session.turns), [c.direct_question for c in canaries])
        )
        survived.append(sum(probe.probe(c, text).direct_pass for c, (text, _) in zip(canaries, answers)))
        stale.append(
            sum(
                any(token.lower() in text.lower() for token in c.superseded_tokens)
                for c, (text, _) in zip(canaries, answers)
                if c.superseded_tokens
            )
        )
        tokens.extend(spent for _, spent in answers)
    return {
        "survived_per_seed": survived,
        "survived_median": statistics.median(survived),
        "stale_total": sum(stale),
        "tokens_per_question_median": statistics.median(tokens),
        "tokens_total": sum(tokens),
    }


def run_kit(
    policies: Sequence[str], model: Callable[[], ChatClient], *, seeds: Sequence[int] = KIT_SEEDS
) -> dict[str, Any]:
    """The kit's figures for each policy and for the kit's reference compactors, as JSON-ready data."""
    kit = _kit()
    for name in policies:
        get_policy(name)
    references = {
        "lossy-truncation": kit.LossyTruncationCompactor,
        "naive-summary": kit.NaiveSummaryCompactor,
        "summary-plus-tail": kit.SummaryTailCompactor,
        "pinned-rules": kit.PinnedRulesCompactor,
        "checklist-carrying": kit.ChecklistCompactor,
        "update-aware-checklist": kit.UpdateAwareChecklistCompactor,
    }
    rows = [
        {
            **_measure(name, "lab policy", partial(PolicyCompactor, name, model), seeds),
            "asked": _measure_asked(name, model, seeds),
        }
        for name in policies
    ]
    rows += [_measure(name, "kit reference", references[name], seeds) for name in KIT_REFERENCES]
    return {
        "kit": "compaction-conformance-kit",
        "kit_version": kit.kit_version(),
        "sessions": f"build_random_session, seeds {', '.join(map(str, seeds))}",
        "rounds": KIT_ROUNDS,
        "budget_fraction": KIT_BUDGET,
        "budget_unit": "characters, a fraction of the original transcript, fixed across rounds",
        "tokens": "characters / 4 of the last round's compacted text, an estimate",
        "asked": (
            "each lab policy asked every canary's direct question on the replayed session: the direct-recall "
            "check on what the model read before it answered; tokens of every call the question took (estimate)"
        ),
        "rows": rows,
    }
