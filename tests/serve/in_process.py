"""The proxy's app in this process, in front of the recording fake upstream (its chat completions,
Responses and Messages APIs), on a SQLite store: for tests where a socket adds nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.serve.conftest import FakeUpstream

from contextledger.serve import ServeConfig, StrategySpec

__all__ = ["proxy_app"]


def proxy_app(fake_upstream: FakeUpstream, folder: Path, strategy: StrategySpec | None = None) -> Any:
    """The app (``app.state.proxy`` behind it); the proxy's default strategy unless ``strategy``."""
    from contextledger.serve import create_app  # noqa: PLC0415  (the serve extra; callers skip without it)

    extra: dict[str, Any] = {} if strategy is None else {"strategy": strategy}
    config = ServeConfig(
        fake_upstream.base_url,
        anthropic_upstream=fake_upstream.base_url.removesuffix("/v1"),
        store=f"sqlite:{folder / 's.db'}",
        **extra,
    )
    return create_app(config)
