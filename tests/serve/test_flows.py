"""Every endpoint's requests go through the one flow of their mode: a stateless request of any API
through ``StatelessFlow.request``, a session turn through ``SessionFlow.turn``; no API's module
repeats their steps (read, refuse, compact, remember, forward), so a rule added to a step holds on
every endpoint.

Read from the source (what the modules call) and checked at run time (which function a request of
each API goes through, on the real app, in process).
"""

from __future__ import annotations

import ast
import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.optional_imports import try_import
from tests.serve.conftest import FakeUpstream

from contextledger.serve import ServeConfig

with try_import("serve") as serve_extra:
    import httpx

    from contextledger.serve import create_app
    from contextledger.serve._stateless import StatelessFlow

pytestmark = serve_extra.skip


SERVE = Path(__file__).resolve().parents[2] / "src" / "contextledger" / "serve"
FORMATS = ("_chat.py", "_responses.py", "_messages_api.py")
# What only the flows may call: compaction, the conversation check, the body memo, the upstream.
FLOW_STEPS = {"compact_with_report", "apply_compaction", "opened_by_user", "refuse_invalid", "recall", "keep"}
RELAY_CALLS = {"call", "stream"}


def called_names(path: Path) -> Counter[str]:
    """The names a module calls, as ``f(...)`` or ``x.f(...)``."""
    found: Counter[str] = Counter()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name):
                found[function.id] += 1
            elif isinstance(function, ast.Attribute):
                found[function.attr] += 1
    return found


@pytest.mark.parametrize("module", FORMATS)
def test_no_api_module_repeats_a_flow_step(module: str) -> None:
    called = called_names(SERVE / module)
    repeated = sorted(name for name in FLOW_STEPS | RELAY_CALLS if called[name])
    # A format names its own conversation check (``refuse``) by calling the shared one once.
    allowed = {"refuse_invalid": 1} if module != "_responses.py" else {}
    assert [name for name in repeated if called[name] > allowed.get(name, 0)] == [], module


def test_the_flows_are_the_only_callers_of_compaction_and_the_relay_in_serve() -> None:
    callers = {
        path.name
        for path in SERVE.glob("*.py")
        if called_names(path)["compact_with_report"] or called_names(path)["opened_by_user"]
    }
    assert callers == {"_stateless.py", "_flow.py"}


def bodies() -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        "chat": ("/v1/chat/completions", {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}),
        "responses": ("/v1/responses", {"model": "fake", "input": [{"role": "user", "content": "hi"}]}),
        "messages": (
            "/v1/messages",
            {"model": "fake", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
        ),
    }


def test_every_stateless_request_goes_through_the_one_flow(
    fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[str] = []
    original = StatelessFlow.request

    async def spy(self: StatelessFlow, form: Any, request: Any, body: bytes) -> Any:
        seen.append(type(form).__name__)
        return await original(self, form, request, body)

    monkeypatch.setattr(StatelessFlow, "request", spy)
    config = ServeConfig(
        fake_upstream.base_url,
        anthropic_upstream=fake_upstream.base_url.removesuffix("/v1"),
        store=f"sqlite:{tmp_path / 's.db'}",
    )
    app = create_app(config)

    async def run() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            for path, payload in bodies().values():
                headers = {"authorization": "Bearer sk-flows", "x-api-key": "sk-flows"}
                answer = await client.post(path, content=json.dumps(payload), headers=headers)
                assert answer.status_code == 200, answer.text
        await app.state.proxy.close()

    asyncio.run(run())
    assert seen == ["ChatFormat", "ResponsesFormat", "MessagesFormat"]
