"""Reports of a lab run: one summary table shared by every format, and a self-contained HTML page.

The HTML page has no script, no font and no link: its charts are static SVG,
so it opens the same way with no network, in any browser, years from now.
Every figure is labelled with what it is (an estimate, an exact count, what
the provider reported); policies appear in the order they were run, and no
figure is turned into a verdict.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["COLUMNS", "render_html", "summary_rows"]

COLUMNS = (
    ("policy", "policy"),
    ("calls", "model calls + extra calls"),
    ("tokens", "tokens sent, estimate (chars/4)"),
    ("extra_tokens", "of which extra calls"),
    ("exact", "tokens sent, exact"),
    ("reported", "usage reported by the provider"),
    ("current", "current values present"),
    ("superseded", "superseded values present"),
    ("prohibition", "prohibition present"),
    ("forgotten", "forgotten values present"),
    ("evicted", "evicted values present"),
    ("notes", "notes"),
)
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f")
# Two policies can send exactly the same thing (a request view and a last-turns window often do):
# distinct dash patterns keep both lines visible where they overlap.
DASHES = ("", "8 4", "2 3", "10 3 2 3", "4 4", "1 2", "12 6", "6 2 2 2", "3 6")
SHOWN_CHARS = 400
PROBE_ROWS = (
    ("current", "current values"),
    ("superseded", "superseded values"),
    ("prohibition", "prohibition"),
    ("forgotten", "forgotten values"),
    ("evicted", "evicted values"),
)


def _count(value: Any) -> str:
    return "unknown" if value == "unknown" else "-" if value is None else f"{int(value):,}"


def _ratio(present: int, expected: int, compact: bool = False) -> str:
    if expected == 0:
        return "-" if compact else "none expected"
    if compact:
        return f"{present}/{expected}"
    return f"{present}/{expected} ({100 * present / expected:.0f}%)"


def _reported(totals: Mapping[str, Any], compact: bool = False) -> str:
    if "unknown" in (totals["reported_input"], totals["reported_output"]):
        return "unknown"
    if compact:
        label = " est." if totals["reported_is_estimate"] else ""
        return f"{_count(totals['reported_input'])} / {_count(totals['reported_output'])}{label}"
    label = " (estimate)" if totals["reported_is_estimate"] else ""
    return f"in {_count(totals['reported_input'])} / out {_count(totals['reported_output'])}{label}"


def summary_rows(timeline: Mapping[str, Any], *, compact: bool = False) -> list[dict[str, str]]:
    """One row of display strings per policy of a timeline, keyed like :data:`COLUMNS`.

    ``compact`` shortens the cells for a terminal: bare counts, ``-`` for "none expected".
    """
    rows = []
    for policy in timeline["policies"]:
        totals = policy["totals"]
        probes = totals["probes"]
        extra = totals["extra_calls"]
        extra_text = " + ".join(f"{n} {kind}" for kind, n in extra.items())
        if compact:
            extra_text = " + ".join(f"{n}" for n in extra.values())
        notes = sum(len(turn["notes"]) for turn in policy["turns"])
        scripted = sum(1 for turn in policy["turns"] if turn["scripted_reply"])
        note_parts = []
        if notes:
            note_parts.append(f"{notes} note(s)")
        if scripted:
            plural = "y" if scripted == 1 else "ies"
            note_parts.append(f"{scripted} scripted" if compact else f"{scripted} scripted repl{plural}, not sent")
        superseded = _ratio(probes["superseded_present"], probes["superseded_expected"], compact)
        if probes["superseded_expected"] and not compact:
            superseded += f", {probes['turns_with_superseded_present']} turn(s)"
        rows.append(
            {
                "policy": policy["name"],
                "calls": f"{totals['model_calls']}" + (f" + {extra_text}" if extra_text else ""),
                "tokens": _count(totals["input_estimate"]),
                "extra_tokens": _count(totals["extra"]["input_estimate"]),
                "exact": _count(totals["input_exact"]),
                "reported": _reported(totals, compact),
                "current": _ratio(probes["current_present"], probes["current_expected"], compact),
                "superseded": superseded,
                "prohibition": (
                    f"{probes['prohibition_present']}/{probes['prohibition_turns']}{'' if compact else ' turns'}"
                    if probes["prohibition_turns"]
                    else "-"
                    if compact
                    else "none in force"
                ),
                "forgotten": _ratio(probes["forgotten_present"], probes["forgotten_expected"], compact),
                "evicted": _ratio(probes["evicted_present"], probes["evicted_expected"], compact),
                "notes": ", ".join(note_parts) or "-",
            }
        )
    return rows


def answer_rows(timeline: Mapping[str, Any]) -> list[dict[str, str]]:
    """Live answer probes, one row per policy and question (empty when none were asked)."""
    rows = []
    for policy in timeline["policies"]:
        for item in policy.get("answers", {}).get("questions", []):
            rows.append(
                {
                    "policy": policy["name"],
                    "key": item["key"],
                    "value": item["value"],
                    "current": f"{item['answers_with_current_value']}/{item['replicates']}",
                    "superseded": f"{item['answers_with_superseded_value']}/{item['replicates']}",
                }
            )
    return rows


# HTML ----------------------------------------------------------------------------------------------

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:1200px;padding:0 1rem;color:#222}
h1{font-size:1.6rem}h2{margin-top:2.5rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.8rem 0;font-size:13px}
th,td{border:1px solid #ddd;padding:.25rem .45rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}.muted{color:#666}figure{margin:1rem 0}figcaption{font-weight:600;margin-bottom:.3rem}
svg text{font:11px system-ui,sans-serif;fill:#333}.axis{stroke:#999;stroke-width:1}
.series{fill:none;stroke-width:1.6}.present{opacity:1}.partial{opacity:.45}.absent{fill:#fff;stroke-width:.6}
.none{fill:#eee}.notsent{fill:#fafafa}ol.sent{font:12px/1.35 ui-monospace,monospace;white-space:pre-wrap}
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _color(position: int) -> str:
    return PALETTE[position % len(PALETTE)]


def _tokens_of(turn: Mapping[str, Any], exact: bool) -> int:
    tokens = turn["tokens"]
    value = tokens["input_exact"] if exact else tokens["input_estimate"]
    return int(value or 0)


def _tokens_chart(timeline: Mapping[str, Any], exact: bool) -> str:
    policies = timeline["policies"]
    turns = int(timeline["turns"])
    width, height, left, right, top, bottom = 900, 280, 70, 170, 12, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max([1, *(_tokens_of(t, exact) for p in policies for t in p["turns"])])

    def x(turn: int) -> float:
        return left + (plot_w * (turn - 1) / (turns - 1) if turns > 1 else plot_w / 2)

    def y(value: int) -> float:
        return top + plot_h - plot_h * value / peak

    unit = "exact tokens" if exact else "tokens (estimate)"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{_esc(unit)} sent per turn, per policy">',
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>',
    ]
    for value in (0, peak // 2, peak):
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:,}</text>')
    for turn in sorted({1, (turns + 1) // 2, turns}):
        parts.append(f'<text x="{x(turn):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{turn}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 2}" text-anchor="middle">turn</text>')
    for position, policy in enumerate(policies):
        color = _color(position)
        dash = DASHES[position % len(DASHES)]
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        points = " ".join(f"{x(t['turn']):.1f},{y(_tokens_of(t, exact)):.1f}" for t in policy["turns"])
        parts.append(
            f'<polyline class="series" data-chart="tokens" data-policy="{_esc(policy["name"])}" '
            f'stroke="{color}"{dashed} points="{points}"><title>{_esc(policy["name"])}</title></polyline>'
        )
        ly = top + 14 + 18 * position
        parts.append(
            f'<line x1="{left + plot_w + 10}" y1="{ly - 4}" x2="{left + plot_w + 40}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="2.5"{dashed}/>'
            f'<text x="{left + plot_w + 46}" y="{ly}">{_esc(policy["name"])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _cell(kind: str, probes: Mapping[str, Any] | None) -> tuple[str, str]:
    """(css class, description) of one probe cell."""
    if probes is None:
        return "notsent", "nothing sent (scripted reply)"
    if kind == "prohibition":
        value = probes["prohibition"]
        if value is None:
            return "none", "no prohibition in force"
        return ("present", "prohibition present") if value else ("absent", "prohibition absent")
    expected = probes[kind]["expected"]
    present = len(probes[kind]["present"])
    if expected == 0:
        return "none", f"no {kind} value to look for"
    if present == expected:
        return "present", f"{kind}: {present}/{expected} present"
    if present == 0:
        return "absent", f"{kind}: 0/{expected} present"
    return "partial", f"{kind}: {present}/{expected} present"


def _runs(cells: Sequence[tuple[str, str]]) -> Iterable[tuple[int, int, str, str]]:
    """Consecutive equal cells merged: (first turn, last turn, class, description)."""
    start = 0
    for position in range(1, len(cells) + 1):
        if position == len(cells) or cells[position] != cells[start]:
            yield start + 1, position, cells[start][0], cells[start][1]
            start = position


def _probes_chart(timeline: Mapping[str, Any]) -> str:
    policies = timeline["policies"]
    turns = int(timeline["turns"])
    left, row_h, gap, width = 230, 11, 10, 900
    plot_w = width - left - 20
    cell_w = plot_w / turns
    height = 30 + len(policies) * (len(PROBE_ROWS) * row_h + gap)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="probe outcomes per turn, per policy">'
    ]
    y = 8.0
    for position, policy in enumerate(policies):
        color = _color(position)
        for kind, label in PROBE_ROWS:
            cells = [_cell(kind, turn["probes"]) for turn in policy["turns"]]
            parts.append(
                f'<g class="probe-row" data-chart="probes" data-policy="{_esc(policy["name"])}" '
                f'data-probe="{kind}" data-turns="{len(cells)}">'
                f'<text x="{left - 6}" y="{y + row_h - 2:.1f}" text-anchor="end">'
                f"{_esc(policy['name'])} · {label}</text>"
            )
            for first, last, css, text in _runs(cells):
                fill = "" if css in ("none", "notsent") else f' fill="{color}" stroke="{color}"'
                span = f"turn {first}" if first == last else f"turns {first}-{last}"
                parts.append(
                    f'<rect class="cell {css}" x="{left + cell_w * (first - 1):.2f}" y="{y:.1f}" '
                    f'width="{cell_w * (last - first + 1):.2f}" height="{row_h - 2}"{fill}>'
                    f"<title>{_esc(span)}: {_esc(text)}</title></rect>"
                )
            parts.append("</g>")
            y += row_h
        y += gap
    parts.append(f'<text x="{left}" y="{y + 12:.0f}">turn 1</text>')
    parts.append(f'<text x="{left + plot_w}" y="{y + 12:.0f}" text-anchor="end">turn {turns}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _shown(message: Mapping[str, Any]) -> str:
    """One sent message as a line of text: role, then content, tool calls or tool result."""
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    text = content or ""
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        text += f" [calls {function.get('name')}({function.get('arguments')})]"
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 1] + "…"
    return f"{message.get('role')}: {text}"


def _last_requests(timeline: Mapping[str, Any]) -> str:
    """What each policy sent on the last turn it sent anything, message by message."""
    out = [
        "<details><summary>What each policy sent on its last model call (messages cut at "
        f"{SHOWN_CHARS} characters; the JSON report has every message of every call in full)</summary>"
    ]
    for policy in timeline["policies"]:
        calls = [(turn["turn"], call) for turn in policy["turns"] for call in turn["calls"]]
        if not calls:
            continue
        number, call = calls[-1]
        rows = "".join(f"<li>{_esc(_shown(policy['messages'][i]))}</li>" for i in call["messages"])
        out.append(
            f"<h4>{_esc(policy['name'])} · turn {number} · {len(call['messages'])} messages · "
            f"{call['input_estimate']:,} tokens (estimate)</h4><ol class=sent>{rows}</ol>"
        )
    out.append("</details>")
    return "".join(out)


def _table(columns: Sequence[tuple[str, str]], rows: Sequence[Mapping[str, str]]) -> str:
    head = "".join(f"<th>{_esc(title)}</th>" for _, title in columns)
    body = "".join("<tr>" + "".join(f"<td>{_esc(row[key])}</td>" for key, _ in columns) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(data: Mapping[str, Any]) -> str:
    """The whole report as one HTML document (no script, no external resource)."""
    settings = data["settings"]
    exact = settings["tokenizer"] != "estimate"
    columns = [c for c in COLUMNS if exact or c[0] != "exact"]
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>contextledger drift lab</title><style>{_STYLE}</style></head><body>",
        "<h1>contextledger drift lab</h1>",
        "<p>The same timelines under each context policy: what was sent, what it cost, and what the context "
        "still held. Policies appear in the order they were run; the figures are measurements, not a verdict.</p>",
        "<p class=muted>"
        + _esc(
            f"model: {settings['model']} · tokens: {settings['estimate']}"
            + (f" and exact {settings['tokenizer']} counts" if exact else "")
            + f" · facts writer: {settings['writer']} · summary every {settings['summary_every']} turns"
            + (f" · answer probes: {settings['replicates']} replicate(s)" if settings["answer_probes"] else "")
        )
        + "</p>",
        "<p class=muted>Probes are exact substring checks of the text sent on each turn: <b>current</b> values are "
        "those the facts contract holds (the latest declaration of each key, at most five, minus what was "
        "forgotten); <b>superseded</b> values were replaced by a later declaration; <b>evicted</b> values were "
        "dropped by the five-fact bound though never retracted. Tokens sent count every message, the tool "
        "definitions offered and the extra calls; provider usage is shown as reported, or <i>unknown</i>.</p>",
    ]
    for timeline in data["timelines"]:
        out.append(f'<section class="timeline" data-timeline="{_esc(timeline["name"])}">')
        out.append(f"<h2>{_esc(timeline['name'])}</h2>")
        if timeline["description"]:
            out.append(f"<p>{_esc(timeline['description'])}</p>")
        out.append(f"<p class=muted>{_esc(timeline['source'])} · {timeline['turns']} turns</p>")
        out.append(_table(columns, summary_rows(timeline)))
        answers = answer_rows(timeline)
        if answers:
            out.append("<h3>Answers to probe questions (exact match)</h3>")
            out.append(
                _table(
                    [
                        ("policy", "policy"),
                        ("key", "key"),
                        ("value", "current value"),
                        ("current", "answers with the current value"),
                        ("superseded", "answers with a superseded value"),
                    ],
                    answers,
                )
            )
        unit = "exact tokens" if exact else "tokens, estimate (chars/4)"
        out.append(
            f'<figure class="chart" data-chart="tokens"><figcaption>Tokens sent per turn ({_esc(unit)}; model and '
            f"extra calls)</figcaption>{_tokens_chart(timeline, exact)}</figure>"
        )
        out.append(
            '<figure class="chart" data-chart="probes"><figcaption>Probe outcomes per turn (filled: present in the '
            "context sent; outlined: absent; pale: partly present; grey: nothing to look for or nothing sent)"
            f"</figcaption>{_probes_chart(timeline)}</figure>"
        )
        out.append("<details><summary>What each policy sends</summary><ul>")
        for policy in timeline["policies"]:
            out.append(f"<li><b>{_esc(policy['name'])}</b>: {_esc(policy['description'])}</li>")
        out.append("</ul></details>")
        out.append(_last_requests(timeline))
        out.append("</section>")
    out.append("</body></html>\n")
    return "".join(out)
