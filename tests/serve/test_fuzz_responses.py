"""Near-valid Responses API bodies through a real proxy, stateless (with and without a strategy) and
in sessions: never a 500, every refusal in the API's error shape, and nothing forwarded that breaks
the Responses API's structural rules (``responses_problems``: a call without its output or an output
without its call, a reasoning item last, a call or item id used twice, an empty input).  The
bodies come from a seeded generator, so a failure names one that can be sent again."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from tests.serve.conftest import FakeUpstream, StartProxy
from tests.sizes import sized

from contextledger.messages import responses_problems

KEY = "sk-responses-fuzz-5"
BODIES = sized(full=1_500, small=250)
WINDOW = ("--strategy", "sliding-window", "--param", "trigger=turns_exceed(2)")
ODD_VALUES: list[Any] = [None, "", 0, -1, True, [], {}, "x" * 300, "\u202e\U0001f600", {"type": "unknown"}, [None]]


def valid_input(turns: int, rng: random.Random) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for turn in range(turns):
        items.append({"role": "user", "content": f"turn {turn}: use the tool"})
        if rng.random() < 0.5:
            summary = [{"type": "summary_text", "text": f"thought {turn}"}]
            items.append({"type": "reasoning", "id": f"rs_{turn}", "summary": summary})
        for call in range(rng.randint(1, 2)):
            call_id = f"call_{turn}_{call}"
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{turn}_{call}",
                    "call_id": call_id,
                    "name": "lookup",
                    "arguments": "{}",
                }
            )
            items.append({"type": "function_call_output", "call_id": call_id, "output": "ok"})
        reply = [{"type": "output_text", "text": f"answer {turn}"}]
        items.append({"type": "message", "role": "assistant", "id": f"msg_{turn}", "content": reply})
    return items


def mutated(rng: random.Random, session: bool) -> bytes:
    """A valid body (a whole conversation; a session turn's new items), then 0 to 3 changes to its
    items: a field set to an odd value or removed, an item repeated, dropped or moved."""
    items = valid_input(rng.randint(1, 6), rng)
    if session:
        items = [{"role": "user", "content": f"next {rng.randrange(1000)}"}]
    body: dict[str, Any] = {"model": "fake", "input": items}
    if rng.random() < 0.1:
        body["previous_response_id"] = "resp_earlier"
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        if not items:
            break
        action = rng.random()
        at = rng.randrange(len(items))
        if action < 0.3:
            items[at][rng.choice(["type", "role", "content", "call_id", "id", "output", "name"])] = copy.deepcopy(
                rng.choice(ODD_VALUES)
            )
        elif action < 0.5:
            del items[at]
        elif action < 0.7:
            items.insert(rng.randrange(len(items) + 1), copy.deepcopy(items[at]))
        else:
            items.insert(rng.randrange(len(items) + 1), items.pop(at))
    raw = json.dumps(body).encode()
    if rng.random() < 0.03:
        raw = raw[: rng.randrange(len(raw))]
    return raw


def test_near_valid_responses_bodies_never_fail_the_proxy_and_nothing_forwarded_breaks_the_rules(
    start_proxy: StartProxy, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    rng = random.Random("responses-fuzz")
    statuses: Counter[tuple[str, int]] = Counter()
    with (
        start_proxy(*WINDOW, "--store", f"sqlite:{tmp_path / 'window.db'}") as compacting,
        start_proxy("--strategy", "none", "--store", f"sqlite:{tmp_path / 'plain.db'}") as plain,
    ):
        fake_upstream.clear()
        compacting.create_session("fuzzed", KEY)
        modes = {"stateless": plain, "stateless with a strategy": compacting, "session": compacting}
        for number in range(BODIES):
            mode = list(modes)[number % len(modes)]
            headers = {"X-Contextledger-Session": "fuzzed"} if mode == "session" else {}
            raw = mutated(rng, session=mode == "session")
            status, answer = modes[mode].call("POST", "/v1/responses", raw, KEY, headers=headers)
            statuses[(mode, status)] += 1
            assert status < 500, (number, mode, raw[:400], answer)
            if status >= 400:
                assert isinstance(answer, dict), (number, answer)
                assert set(answer) == {"error"}, (number, answer)
                assert isinstance(answer["error"]["message"], str)
        logs = compacting.log.read_text(errors="replace") + plain.log.read_text(errors="replace")
    assert "Traceback" not in logs
    forwarded = [r for r in fake_upstream.received() if r["path"] == "/v1/responses"]
    broken = [(problems, record["body"]) for record in forwarded if (problems := responses_problems(record["body"]))]
    summary = dict(sorted(statuses.items()))
    print(f"{summary}; {len(forwarded)} forwarded, {len(broken)} breaking the Responses API's rules")
    assert broken == [], (len(broken), broken[:3])
    for mode in modes:  # valid bodies and the mutations the API takes pass, in every mode
        assert statuses[(mode, 200)] > BODIES // 30, summary
