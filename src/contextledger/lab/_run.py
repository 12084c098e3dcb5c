"""Running timelines under policies and measuring what each one sent, what it cost and what it kept.

The result is plain JSON data (see :class:`LabReport`), deterministic for a
deterministic model: no clock, no random id and no duration is recorded, so
two offline runs give byte-identical reports.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from contextledger.clients import ChatClient, Usage
from contextledger.cost import PrefixCacheSimulator, price_profile, request_blocks
from contextledger.exceptions import ConfigurationError, LabError
from contextledger.lab._calls import MODEL, CallLog, CallRecord, RecordingClient, ToolBox
from contextledger.lab._contract import PROHIBITION_KEY, expectations, final_state
from contextledger.lab._policies import PolicySetup, get_policy, policy_names
from contextledger.lab._probes import check_context, decoded_text, is_present
from contextledger.lab._timeline import Timeline
from contextledger.messages import Message
from contextledger.messages._openai import message_to_openai
from contextledger.tokenizers import CharacterEstimatorTokenizer, Tokenizer, get_tokenizer

__all__ = ["FORMAT", "LabReport", "LabSettings", "run_lab", "run_lab_sync"]

FORMAT = "contextledger.lab/2"
UNKNOWN = "unknown"
ProgressCallback = Callable[[int, int, str], None]


@dataclass(frozen=True)
class LabSettings:
    """How the lab runs.

    ``tokenizer`` adds exact counts (``cl100k_base`` or ``o200k_base``) beside
    the character estimate, which is always reported.  ``ask_probes`` asks
    each policy, after the last turn, one question per key the timeline
    declared (the timeline's own question, or one derived from the key),
    ``replicates`` times, and scores each answer: the current value given, no
    superseded, forgotten, evicted or rejected value given, the prohibition
    kept.  It is meant for live and local models; the scores are reported
    beside the text checks, never merged into them.  ``price_profile`` names the
    provider terms (``openai``, ``gpt-5.6``, ``anthropic``, ``none``) each call is priced under,
    with the provider's prefix cache estimated over the policy's calls in order.
    """

    policies: tuple[str, ...] = ()
    tokenizer: str = "estimate"
    writer: Literal["model", "rules"] = "model"
    summary_every: int = 4
    replicates: int = 1
    ask_probes: bool = False
    model_label: str = "offline"
    price_profile: str = "openai"

    def checked(self) -> LabSettings:
        names = self.policies or policy_names()
        for name in names:
            get_policy(name)
        if len(set(names)) != len(names):
            raise LabError(f"a policy is listed twice in {', '.join(names)}")
        if self.writer not in ("model", "rules"):
            raise ConfigurationError(f"writer must be 'model' or 'rules', got {self.writer!r}")
        for value, what in ((self.summary_every, "summary_every"), (self.replicates, "replicates")):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{what} must be an integer of at least 1, got {value!r}")
        price_profile(self.price_profile)
        return LabSettings(
            tuple(names),
            self.tokenizer,
            self.writer,
            self.summary_every,
            self.replicates,
            self.ask_probes,
            self.model_label,
            self.price_profile,
        )


@dataclass(frozen=True)
class LabReport:
    """The lab's measurements as JSON-ready data; ``to_json()`` is the deterministic serialisation."""

    data: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(self.data, ensure_ascii=False, separators=(",", ":")) + "\n"


class _Counter:
    """Token counts for the estimate and, when chosen, an exact tokenizer."""

    def __init__(self, exact: Tokenizer | None) -> None:
        self.estimate = CharacterEstimatorTokenizer()
        self.exact = exact

    def count(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()) -> tuple[int, int | None]:
        tools_text = json.dumps(list(tools), sort_keys=True, ensure_ascii=False) if tools else ""
        estimate = sum(self.estimate.count_messages(messages)) + (
            self.estimate.count_text(tools_text) if tools_text else 0
        )
        exact = None
        if self.exact is not None:
            exact = sum(self.exact.count_messages(messages)) + (self.exact.count_text(tools_text) if tools_text else 0)
        return estimate, exact


class _MessageTable:
    """Each distinct message sent under a policy, once; calls refer to messages by position."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._by_object: dict[int, tuple[Message, int]] = {}
        self._by_body: dict[str, int] = {}

    def positions(self, messages: Sequence[Message]) -> list[int]:
        found: list[int] = []
        for message in messages:
            known = self._by_object.get(id(message))
            if known is not None and known[0] is message:
                found.append(known[1])
                continue
            row = message_to_openai(message)
            body = json.dumps(row, sort_keys=True, ensure_ascii=False)
            position = self._by_body.get(body)
            if position is None:
                position = len(self.rows)
                self.rows.append(row)
                self._by_body[body] = position
            self._by_object[id(message)] = (message, position)
            found.append(position)
        return found


def _reported(usage: Usage | None) -> dict[str, Any]:
    if usage is None:
        return {"input": UNKNOWN, "output": UNKNOWN, "estimate": False}
    return {
        "input": UNKNOWN if usage.input_tokens is None else usage.input_tokens,
        "output": UNKNOWN if usage.output_tokens is None else usage.output_tokens,
        "estimate": usage.is_estimate,
    }


def _add(total: Any, value: Any) -> Any:
    """Sum two counts where either may be ``unknown`` (which wins) or ``None`` (not measured)."""
    if UNKNOWN in (total, value):
        return UNKNOWN
    if total is None or value is None:
        return None
    return int(total) + int(value)


_TOKEN_FIELDS = (
    "input_estimate",
    "output_estimate",
    "input_exact",
    "output_exact",
    "reported_input",
    "reported_output",
    "cache_read",
    "cache_written",
    "uncached",
)


def _zero_tokens(exact: bool) -> dict[str, Any]:
    zero = 0 if exact else None
    return {
        "input_estimate": 0,
        "output_estimate": 0,
        "input_exact": zero,
        "output_exact": zero,
        "reported_input": 0,
        "reported_output": 0,
        "reported_is_estimate": False,
        "cache_read": 0,
        "cache_written": 0,
        "uncached": 0,
        "cost": 0.0,
    }


def _accumulate(total: dict[str, Any], call: Mapping[str, Any]) -> None:
    for name in _TOKEN_FIELDS:
        total[name] = _add(total[name], call[name])
    total["reported_is_estimate"] = bool(total["reported_is_estimate"] or call["reported_is_estimate"])
    total["cost"] = round(total["cost"] + call["cost"], 4)


class _PolicyRun:
    """Measures one policy over one timeline."""

    def __init__(
        self, timeline: Timeline, name: str, model: ChatClient, settings: LabSettings, counter: _Counter
    ) -> None:
        self.timeline = timeline
        self.name = name
        self.settings = settings
        self.counter = counter
        self.log = CallLog()
        self.table = _MessageTable()
        self.client = RecordingClient(model, self.log, MODEL)
        self.tools = ToolBox(timeline)
        setup = PolicySetup(
            timeline=timeline,
            client=self.client,
            extra_client=lambda kind: RecordingClient(model, self.log, kind),
            tools=self.tools,
            writer=settings.writer,
            summary_every=settings.summary_every,
        )
        self.policy = get_policy(name).factory(setup)
        # One provider cache per policy run: its calls (writer and summariser too) in the order sent.
        self.cache = PrefixCacheSimulator(settings.price_profile)

    def measure_call(self, record: CallRecord) -> dict[str, Any]:
        input_estimate, input_exact = self.counter.count(record.request, record.tools)
        output_estimate, output_exact = self.counter.count(record.reply)
        reported = _reported(record.usage)
        blocks = request_blocks(record.request, tokenizer=self.counter.estimate, tools=record.tools)
        priced = self.cache.send(blocks, output_tokens=output_estimate)
        return {
            "kind": record.kind,
            "messages": self.table.positions(record.request),
            "reply": self.table.positions(record.reply),
            "tools_offered": len(record.tools),
            "input_estimate": input_estimate,
            "output_estimate": output_estimate,
            "input_exact": input_exact,
            "output_exact": output_exact,
            "reported_input": reported["input"],
            "reported_output": reported["output"],
            "reported_is_estimate": reported["estimate"],
            "cache_read": priced.cache_read,
            "cache_written": priced.cache_write,
            "uncached": priced.uncached,
            "cost": round(priced.cost, 4),
        }

    async def run(self, progress: Callable[[str], None]) -> dict[str, Any]:
        exact = self.counter.exact is not None
        turns: list[dict[str, Any]] = []
        totals = _zero_tokens(exact)
        extra_totals = _zero_tokens(exact)
        model_calls = 0
        extra_kinds: dict[str, int] = {}
        for turn, expectation in zip(self.timeline.turns, expectations(self.timeline.turns)):
            # A pause per turn: an offline model never suspends, and Ctrl-C under asyncio.run is a
            # cancellation that lands only at a pause, so without one it waited for the whole run.
            await asyncio.sleep(0)
            self.tools.turn = turn
            for command in turn.host_commands:
                await self.policy.host_command(command)
            self.client.scripted_reply = turn.scripted_reply
            self.client.scripted_tools = tuple(turn.tool_results) if turn.scripted_reply is not None else ()
            self.client.scripted_turn = turn.number
            try:
                await self.policy.run_turn(turn)
            finally:
                self.client.scripted_reply = None
                self.client.scripted_tools = ()
            records = self.log.take()
            model_records = [r for r in records if r.kind == MODEL]
            calls = [self.measure_call(r) for r in model_records]
            extra = [self.measure_call(r) for r in records if r.kind != MODEL]
            turn_tokens = _zero_tokens(exact)
            for call in calls:
                _accumulate(turn_tokens, call)
                _accumulate(totals, call)
            for call in extra:
                _accumulate(turn_tokens, call)
                _accumulate(totals, call)
                _accumulate(extra_totals, call)
                extra_kinds[call["kind"]] = extra_kinds.get(call["kind"], 0) + 1
            model_calls += len(calls)
            probes = None
            if model_records:
                text = decoded_text((r.request for r in model_records), self.policy.wording)
                probes = check_context(expectation, text).to_json(expectation)
            kept = await self.policy.kept()
            notes = self.policy.take_notes()
            if turn.rejection is not None:
                notes.insert(0, f"the message's declarations are rejected by the facts contract: {turn.rejection}")
            turns.append(
                {
                    "turn": turn.number,
                    "scripted_reply": turn.scripted_reply is not None,
                    "host_commands": [command.text for command in turn.host_commands],
                    "tokens": turn_tokens,
                    "calls": calls,
                    "extra_calls": extra,
                    "probes": probes,
                    "kept": {"messages": len(kept), "tokens_estimate": self.counter.count(kept)[0]},
                    "notes": notes,
                }
            )
            progress(f"{self.timeline.name} · {self.name}")
        result: dict[str, Any] = {
            "name": self.name,
            "description": get_policy(self.name).description,
            "totals": {
                **totals,
                "model_calls": model_calls,
                "extra_calls": dict(sorted(extra_kinds.items())),
                "extra": extra_totals,
                "probes": _probe_totals(turns),
                "kept_at_end": turns[-1]["kept"] if turns else {"messages": 0, "tokens_estimate": 0},
            },
            "turns": turns,
        }
        if self.settings.ask_probes:
            result["answers"] = await self.answers()
        result["messages"] = self.table.rows
        return result

    async def answers(self) -> dict[str, Any]:
        """Ask about every key the timeline declared, ``replicates`` times, and score each answer."""
        state = final_state(self.timeline.turns)
        current = dict(state.current)
        keys = sorted(
            {key for key, _ in (*state.current, *state.superseded, *state.forgotten, *state.evicted, *state.rejected)}
        )
        self.tools.turn = None
        exact = self.counter.exact is not None
        cost = _zero_tokens(exact)
        items: list[dict[str, Any]] = []
        for key in keys:
            value = current.get(key)
            old = [v for v in state.old_values(key) if v != value]
            question = self.timeline.question(key)
            right = with_current = with_old = 0
            replies: list[str] = []
            for _ in range(self.settings.replicates):
                answer = await self.policy.ask(question)
                for record in self.log.take():
                    _accumulate(cost, self.measure_call(record))
                replies.append(answer)
                gave_current = value is not None and is_present(value, answer)
                gave_old = any(is_present(v, answer) for v in old)
                with_current += gave_current
                with_old += gave_old
                right += (gave_current or value is None) and not gave_old
            items.append(
                {
                    "key": key,
                    "kind": "prohibition"
                    if key == PROHIBITION_KEY and value is not None
                    else "current"
                    if value is not None
                    else "forgotten",
                    "value": value,
                    "old_values": old,
                    "question": question,
                    "replicates": self.settings.replicates,
                    "right": right,
                    "answers_with_current_value": with_current,
                    "answers_with_old_value": with_old,
                    "replies": replies,
                }
            )
        asked = sum(item["replicates"] for item in items)
        return {
            "questions": items,
            "asked": asked,
            "right": sum(item["right"] for item in items),
            "tokens": cost,
        }


def _probe_totals(turns: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    totals = {
        "turns_sent": 0,
        "current_expected": 0,
        "current_present": 0,
        "superseded_expected": 0,
        "superseded_present": 0,
        "turns_with_superseded_present": 0,
        "prohibition_turns": 0,
        "prohibition_present": 0,
        "forgotten_expected": 0,
        "forgotten_present": 0,
        "evicted_expected": 0,
        "evicted_present": 0,
        "rejected_expected": 0,
        "rejected_present": 0,
    }
    for turn in turns:
        probes = turn["probes"]
        if probes is None:
            continue
        totals["turns_sent"] += 1
        totals["current_expected"] += probes["current"]["expected"]
        totals["current_present"] += len(probes["current"]["present"])
        for kind in ("superseded", "forgotten", "evicted", "rejected"):
            totals[f"{kind}_expected"] += probes[kind]["expected"]
            totals[f"{kind}_present"] += len(probes[kind]["present"])
        totals["turns_with_superseded_present"] += bool(probes["superseded"]["present"])
        if probes["prohibition"] is not None:
            totals["prohibition_turns"] += 1
            totals["prohibition_present"] += bool(probes["prohibition"])
    return totals


async def run_lab(
    timelines: Sequence[Timeline],
    model: Callable[[], ChatClient],
    settings: LabSettings | None = None,
    *,
    on_progress: ProgressCallback | None = None,
) -> LabReport:
    """Run every timeline under every policy and return the measurements.

    ``model`` builds a fresh chat client for each (timeline, policy) run, so
    no policy sees another's state.  Any error stops the whole comparison
    (a summary guard, a model failure): a partial comparison is never
    reported as if it were complete.
    """
    if not timelines:
        raise LabError("no timelines to run")
    chosen = (settings or LabSettings()).checked()
    exact = get_tokenizer(chosen.tokenizer) if chosen.tokenizer != "estimate" else None
    counter = _Counter(exact)
    total = sum(len(t.turns) for t in timelines) * len(chosen.policies)
    done = 0

    def step(label: str) -> None:
        nonlocal done
        done += 1
        if on_progress is not None:
            on_progress(done, total, label)

    results: list[dict[str, Any]] = []
    for timeline in timelines:
        policies = []
        for name in chosen.policies:
            run = _PolicyRun(timeline, name, model(), chosen, counter)
            policies.append(await run.run(step))
        results.append(
            {
                "name": timeline.name,
                "source": timeline.source,
                "description": timeline.description,
                "turns": len(timeline.turns),
                "expectations": [e.to_json() for e in expectations(timeline.turns)],
                "policies": policies,
            }
        )
    data = {
        "format": FORMAT,
        "settings": {
            "model": chosen.model_label,
            "policies": list(chosen.policies),
            "tokenizer": chosen.tokenizer,
            "estimate": "characters / 4 (CharacterEstimatorTokenizer), an estimate",
            "writer": chosen.writer,
            "summary_every": chosen.summary_every,
            "answer_probes": chosen.ask_probes,
            "replicates": chosen.replicates,
            "price_profile": _profile_json(chosen.price_profile),
        },
        "timelines": results,
    }
    return LabReport(data)


def _profile_json(name: str) -> dict[str, Any]:
    profile = price_profile(name)
    return {
        "name": profile.name,
        "input_price": profile.input_price,
        "output_price": profile.output_price,
        "cache_read_multiplier": profile.cache_read_multiplier,
        "cache_write_multiplier": profile.cache_write_multiplier,
        "cache_mode": profile.cache_mode,
        "min_cacheable_tokens": profile.min_cacheable_tokens,
        "step_tokens": profile.step_tokens,
        "managed_breakpoint": profile.managed_breakpoint,
        "note": "cost estimated with contextledger.cost's prefix-cache model, from the character estimate; "
        "in units of one uncached input token",
    }


def run_lab_sync(
    timelines: Sequence[Timeline],
    model: Callable[[], ChatClient],
    settings: LabSettings | None = None,
    *,
    on_progress: ProgressCallback | None = None,
) -> LabReport:
    """:func:`run_lab` for callers without an event loop (the command line)."""
    return asyncio.run(run_lab(timelines, model, settings, on_progress=on_progress))
