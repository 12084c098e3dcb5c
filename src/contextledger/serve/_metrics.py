"""Prometheus counters and histograms for the proxy, in the text exposition format.

A handful of series does not justify a dependency, so this is the format written by hand: the
registry keeps counters and histograms keyed by label values and renders them on ``/metrics``.
Label values are chosen by the proxy from small fixed sets (endpoint, mode, status, outcome):
nothing a client sends (a key, a session id, a tenant) ever becomes a label, so no secret and no
unbounded series can reach the metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

__all__ = ["Metrics"]

# Upper bounds in seconds: loopback upstreams answer in milliseconds, real models in seconds.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for value in values)
    return "{" + ",".join(f'{name}="{value}"' for name, value in zip(names, escaped)) + "}"


def _number(value: float) -> str:
    """Every digit of a count (``:g`` would write 1234567 tokens as 1.23457e+06)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class _Counter:
    def __init__(self, name: str, help_text: str, label_names: Sequence[str]) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(label_names)
        self.values: dict[tuple[str, ...], float] = {}

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for key, value in sorted(self.values.items()):
            lines.append(f"{self.name}{_labels(self.label_names, key)} {_number(value)}")
        return lines


class _Histogram:
    def __init__(self, name: str, help_text: str, label_names: Sequence[str]) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(label_names)
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for key, (counts, total) in sorted(self.series.items()):
            names = (*self.label_names, "le")
            running = 0
            for bound, count in zip(_LATENCY_BUCKETS, counts):
                running += count
                lines.append(f"{self.name}_bucket{_labels(names, (*key, f'{bound:g}'))} {running}")
            running += counts[-1]
            lines.append(f"{self.name}_bucket{_labels(names, (*key, '+Inf'))} {running}")
            lines.append(f"{self.name}_sum{_labels(self.label_names, key)} {total[0]:.6f}")
            lines.append(f"{self.name}_count{_labels(self.label_names, key)} {running}")
        return lines


class Metrics:
    """The proxy's series; every method is safe to call from any task or thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = _Counter(
            "contextledger_requests_total",
            "Requests answered, by endpoint, mode and HTTP status.",
            ("endpoint", "mode", "status"),
        )
        self.upstream_seconds = _Histogram(
            "contextledger_upstream_seconds",
            "Time the upstream took to answer (headers, or the whole stream).",
            ("endpoint", "outcome"),
        )
        self.tokens_before = _Counter(
            "contextledger_tokens_before_compaction_total",
            "Estimated tokens of the conversation before compaction (stateless: only with a strategy).",
            ("mode",),
        )
        self.tokens_after = _Counter(
            "contextledger_tokens_after_compaction_total",
            "Estimated tokens of the messages actually sent upstream after compaction.",
            ("mode",),
        )
        self.facts = _Counter(
            "contextledger_facts_total", "Facts admitted, and facts in batches that were rejected.", ("outcome",)
        )
        self.turns = _Counter(
            "contextledger_session_turns_total",
            "Session turns stored, replayed from an Idempotency-Key, or not stored because they failed.",
            ("outcome",),
        )
        self._all: tuple[_Counter | _Histogram, ...] = (
            self.requests,
            self.upstream_seconds,
            self.tokens_before,
            self.tokens_after,
            self.facts,
            self.turns,
        )

    def counter(self, name: str, help_text: str, label_names: Sequence[str]) -> _Counter:
        """A new counter kept by another part of the proxy, rendered after these."""
        added = _Counter(name, help_text, label_names)
        with self._lock:
            self._all = (*self._all, added)
        return added

    def count(self, counter: _Counter, *labels: str, amount: float = 1) -> None:
        with self._lock:
            counter.values[labels] = counter.values.get(labels, 0) + amount

    def observe(self, histogram: _Histogram, seconds: float, *labels: str) -> None:
        with self._lock:
            counts, total = histogram.series.setdefault(labels, ([0] * (len(_LATENCY_BUCKETS) + 1), [0.0]))
            slot = next((i for i, bound in enumerate(_LATENCY_BUCKETS) if seconds <= bound), len(_LATENCY_BUCKETS))
            counts[slot] += 1
            total[0] += seconds

    def render(self) -> str:
        with self._lock:
            lines = [line for series in self._all for line in series.render()]
        return "\n".join(lines) + "\n"
