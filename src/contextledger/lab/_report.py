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

__all__ = ["COLUMNS", "KIT_COLUMNS", "answer_rows", "kit_rows", "overview_rows", "render_html", "summary_rows"]

COLUMNS = (
    ("policy", "policy"),
    ("calls", "model calls + extra calls"),
    ("tokens", "tokens sent, estimate (chars/4)"),
    ("extra_tokens", "of which extra calls"),
    ("exact", "tokens sent, exact"),
    ("cached", "read from the provider's cache / uncached (estimate)"),
    ("cost", "cost, in uncached input tokens (estimate, price profile below)"),
    ("reported", "usage reported by the provider"),
    ("current", "current values present"),
    ("superseded", "superseded values present"),
    ("prohibition", "prohibition present"),
    ("forgotten", "forgotten values present"),
    ("evicted", "evicted values present"),
    ("rejected", "rejected values present"),
    ("kept", "kept at the end: messages / tokens (estimate)"),
    ("answers", "answers right"),
    ("notes", "notes"),
)
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f")
SHOWN_CHARS = 400
PROBE_ROWS = (
    ("current", "current values"),
    ("superseded", "superseded values"),
    ("prohibition", "prohibition"),
    ("forgotten", "forgotten values"),
    ("evicted", "evicted values"),
    ("rejected", "rejected values"),
)
# Present is good for a current value or the prohibition, bad for an old value: two colours, never one.
WANTED = frozenset({"current", "prohibition"})
GOOD, BAD, PARTIAL = "#2e7d32", "#c62828", "#ef6c00"


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
                "cached": f"{_count(totals.get('cache_read', 0))} / {_count(totals.get('uncached', 0))}",
                "cost": f"{totals.get('cost', 0):,.0f}",
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
                "rejected": _ratio(probes.get("rejected_present", 0), probes.get("rejected_expected", 0), compact),
                "kept": f"{totals['kept_at_end']['messages']} / {totals['kept_at_end']['tokens_estimate']:,}",
                "answers": _answers(policy),
                "notes": ", ".join(note_parts) or "-",
            }
        )
    return rows


def _answers(policy: Mapping[str, Any]) -> str:
    answers = policy.get("answers")
    if not answers:
        return "not asked"
    return f"{answers['right']}/{answers['asked']}"


ANSWER_COLUMNS = (
    ("policy", "policy"),
    ("key", "key"),
    ("kind", "what is asked"),
    ("value", "expected value"),
    ("right", "answers right"),
    ("current", "with the current value"),
    ("old", "with an old value"),
)


def answer_rows(timeline: Mapping[str, Any]) -> list[dict[str, str]]:
    """Answer probes, one row per policy and question (empty when none were asked)."""
    rows = []
    for policy in timeline["policies"]:
        for item in policy.get("answers", {}).get("questions", []):
            n = item["replicates"]
            rows.append(
                {
                    "policy": policy["name"],
                    "key": item["key"],
                    "kind": item["kind"],
                    "value": item["value"] if item["value"] is not None else "none (must not be given)",
                    "right": f"{item['right']}/{n}",
                    "current": f"{item['answers_with_current_value']}/{n}" if item["value"] is not None else "-",
                    "old": f"{item['answers_with_old_value']}/{n}" if item["old_values"] else "-",
                }
            )
    return rows


def overview_rows(data: Mapping[str, Any]) -> tuple[list[tuple[str, str]], list[dict[str, str]]]:
    """The one-page summary: one row per policy, one cell per timeline (tokens, current kept, stale sent, answers)."""
    columns = [("policy", "policy")] + [(t["name"], f"{t['name']} ({t['turns']} turns)") for t in data["timelines"]]
    rows: dict[str, dict[str, str]] = {}
    for timeline in data["timelines"]:
        for policy in timeline["policies"]:
            probes = policy["totals"]["probes"]
            stale = sum(probes.get(f"{kind}_present", 0) for kind in ("superseded", "forgotten", "evicted", "rejected"))
            totals = policy["totals"]
            cell = (
                f"{_count(totals['input_estimate'])} tokens\n"
                f"cost {totals.get('cost', 0):,.0f} ({_count(totals.get('cache_read', 0))} cached)\n"
                f"current {probes['current_present']}/{probes['current_expected']}\n"
                f"stale {stale}\nanswers {_answers(policy)}"
            )
            rows.setdefault(policy["name"], {"policy": policy["name"]})[timeline["name"]] = cell
    return columns, list(rows.values())


KIT_COLUMNS = (
    ("name", "policy or kit compactor"),
    ("kind", "kind"),
    ("survived", "canaries kept after the last round"),
    ("stale", "stale values left"),
    ("budget", "within the budget every round"),
    ("tokens", "last round's text, tokens (estimate)"),
    ("extra", "extra calls, tokens (estimate)"),
    ("asked", "asked each canary's question: held, tokens per question (estimate)"),
)


def _asked(row: Mapping[str, Any]) -> str:
    asked = row.get("asked")
    if not isinstance(asked, Mapping):
        return "not asked: no model"
    return f"{asked['survived_median']:g}/{row['canaries']}, {asked['tokens_per_question_median']:,.0f} tokens"


def kit_rows(kit: Mapping[str, Any]) -> list[dict[str, str]]:
    """compaction-conformance-kit's figures, one row per lab policy and kit reference compactor."""
    rows = []
    for row in kit["rows"]:
        seeds = ", ".join(map(str, row["survived_per_seed"]))
        rows.append(
            {
                "name": row["name"],
                "kind": row["kind"],
                "survived": f"{row['survived_median']:g}/{row['canaries']} (per session: {seeds})",
                "stale": f"{row['stale_total']} of {row['updates'] * len(row['stale_per_seed'])}",
                "budget": "yes" if row["within_budget"] else "no",
                "tokens": f"{row['final_tokens_estimate_median']:,.0f}",
                "extra": f"{row['extra_tokens_estimate']:,}",
                "asked": _asked(row),
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
.series{fill:none;stroke-width:1.4}.axis-title{font-weight:600}.panel-title{font-weight:600;font-size:12px}
.panels{display:flex;flex-wrap:wrap;gap:.4rem}.cell.good{fill:#2e7d32}.cell.bad{fill:#c62828}
.cell.partial{fill:#ef6c00}.cell.none{fill:#e6e6e6}.cell.notsent{fill:#fff;stroke:#bbb;stroke-width:.5}
ol.sent{font:12px/1.35 ui-monospace,monospace;white-space:pre-wrap}.legend span{display:inline-block;width:.9em;
height:.9em;margin:0 .25em 0 .8em;vertical-align:middle}table.overview td{white-space:pre-line}
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _color(position: int) -> str:
    return PALETTE[position % len(PALETTE)]


def _tokens_of(turn: Mapping[str, Any], exact: bool) -> int | None:
    """Tokens sent on a turn, or None when nothing was sent (a scripted reply): a gap, never a zero."""
    if not turn["calls"] and not turn["extra_calls"]:
        return None
    tokens = turn["tokens"]
    value = tokens["input_exact"] if exact else tokens["input_estimate"]
    return int(value or 0)


def _ticks(low: int, high: int, count: int = 5) -> list[int]:
    """About ``count`` round values from ``low`` to ``high``, both ends included."""
    if high <= low:
        return [low]
    raw = (high - low) / (count - 1)
    magnitude = 10 ** max(0, len(str(int(raw))) - 1)
    step = max(1, round(raw / magnitude) * magnitude)
    ticks = list(range(low, high, step))
    if high - ticks[-1] < step / 2 and len(ticks) > 1:
        ticks.pop()
    return [*ticks, high]


def _identical_series(policies: Sequence[Mapping[str, Any]], exact: bool) -> list[list[str]]:
    """Groups of policies whose tokens-sent series are equal on every turn (they would hide each other)."""
    groups: dict[tuple[int | None, ...], list[str]] = {}
    for policy in policies:
        groups.setdefault(tuple(_tokens_of(t, exact) for t in policy["turns"]), []).append(policy["name"])
    return [names for names in groups.values() if len(names) > 1]


def _token_panel(policy: Mapping[str, Any], position: int, turns: int, exact: bool, unit: str) -> str:
    """One policy's tokens per turn on its own axis (a split axis), so no series is squashed by another's scale."""
    width, height, left, right, top, bottom = 430, 190, 62, 12, 26, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [(t["turn"], _tokens_of(t, exact)) for t in policy["turns"]]
    kept = {t["turn"]: t.get("kept") for t in policy["turns"]}
    sent = [v for _, v in values if v is not None]
    low, high = (min(sent), max(sent)) if sent else (0, 1)
    if low == high:
        low, high = max(0, low - 1), high + 1

    def x(turn: int) -> float:
        return left + (plot_w * (turn - 1) / (turns - 1) if turns > 1 else plot_w / 2)

    def y(value: int) -> float:
        return top + plot_h - plot_h * (value - low) / (high - low)

    color = _color(position)
    name = _esc(policy["name"])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="panel" width="{width}" height="{height}" role="img" '
        f'data-chart="tokens" data-policy="{name}" data-plot-top="{top}" data-plot-height="{plot_h}" '
        f'aria-label="{name}: {_esc(unit)} sent per turn">',
        f'<text x="{left}" y="14" class="panel-title">{name}</text>',
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}"/>',
    ]
    for tick in _ticks(low, high, 4):
        parts.append(f'<text x="{left - 5}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:,}</text>')
    for turn in _ticks(1, turns, 6):
        parts.append(f'<text x="{x(turn):.1f}" y="{top + plot_h + 14}" text-anchor="middle">{turn}</text>')
    parts.append(
        f'<text class="axis-title" x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle">turn</text>'
    )
    parts.append(
        f'<text class="axis-title" transform="translate(12,{top + plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle">{_esc(unit)}</text>'
    )
    # One path with a gap (a new "M") wherever nothing was sent.
    path: list[str] = []
    previous_sent = False
    for turn, sent_value in values:
        if sent_value is None:
            previous_sent = False
            continue
        path.append(f"{'L' if previous_sent else 'M'}{x(turn):.1f},{y(sent_value):.1f}")
        previous_sent = True
    parts.append(f'<path class="series" stroke="{color}" d="{" ".join(path)}"/>')
    for turn, sent_value in values:
        if sent_value is None:
            continue
        parts.append(
            f'<circle class="marker" cx="{x(turn):.1f}" cy="{y(sent_value):.1f}" r="2.2" fill="{color}">'
            f"<title>{name}, turn {turn}: {sent_value:,} {_esc(unit)} sent{_kept_text(kept[turn])}</title></circle>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _kept_text(kept: Mapping[str, Any] | None) -> str:
    if not kept:
        return ""
    return f"; kept afterwards: {kept['messages']} messages, {kept['tokens_estimate']:,} tokens (estimate)"


def _tokens_chart(timeline: Mapping[str, Any], exact: bool) -> str:
    unit = "exact tokens" if exact else "tokens (estimate)"
    turns = int(timeline["turns"])
    panels = "".join(
        _token_panel(policy, position, turns, exact, unit) for position, policy in enumerate(timeline["policies"])
    )
    notes = [
        f"{' and '.join(names)} send the same number of tokens on every turn; their panels show identical series."
        for names in _identical_series(timeline["policies"], exact)
    ]
    note = "".join(f'<p class="muted coincide">{_esc(text)}</p>' for text in notes)
    return f'<div class="panels">{panels}</div>{note}'


def _cell(kind: str, probes: Mapping[str, Any] | None) -> tuple[str, str]:
    """(css class, description) of one probe cell."""
    if probes is None:
        return "notsent", "nothing sent (scripted reply)"
    if kind == "prohibition":
        value = probes["prohibition"]
        if value is None:
            return "none", "no prohibition in force"
        return ("good", "prohibition present") if value else ("bad", "prohibition absent")
    found = probes.get(kind, {"expected": 0, "present": []})
    expected = found["expected"]
    present = len(found["present"])
    if expected == 0:
        return "none", f"no {kind} value to look for"
    text = f"{kind}: {present}/{expected} present"
    if kind in WANTED:
        return ("good" if present == expected else "bad" if present == 0 else "partial"), text
    return ("good" if present == 0 else "bad" if present == expected else "partial"), text


def _runs(cells: Sequence[tuple[str, str]]) -> Iterable[tuple[int, int, str, str]]:
    """Consecutive equal cells merged: (first turn, last turn, class, description)."""
    start = 0
    for position in range(1, len(cells) + 1):
        if position == len(cells) or cells[position] != cells[start]:
            yield start + 1, position, cells[start][0], cells[start][1]
            start = position


def _probes_chart(timeline: Mapping[str, Any]) -> str:
    """One chart per probe kind, one row per policy; green is the wanted outcome, red the unwanted one."""
    policies = timeline["policies"]
    turns = int(timeline["turns"])
    kinds = [
        (kind, label)
        for kind, label in PROBE_ROWS
        if any(_cell(kind, turn["probes"])[0] != "none" for p in policies for turn in p["turns"])
    ]
    out = []
    for kind, label in kinds:
        left, row_h, width, top = 130, 14, 900, 8
        plot_w = width - left - 20
        cell_w = plot_w / turns
        plot_h = len(policies) * row_h
        height = top + plot_h + 40
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
            f'data-chart="probes" data-probe="{kind}" '
            f'aria-label="{_esc(label)} in the context sent, per turn and policy">'
        ]
        for row, policy in enumerate(policies):
            y = top + row * row_h
            cells = [_cell(kind, turn["probes"]) for turn in policy["turns"]]
            parts.append(
                f'<g class="probe-row" data-policy="{_esc(policy["name"])}" data-probe="{kind}" '
                f'data-turns="{len(cells)}"><text x="{left - 6}" y="{y + row_h - 4}" text-anchor="end">'
                f"{_esc(policy['name'])}</text>"
            )
            for first, last, css, text in _runs(cells):
                span = f"turn {first}" if first == last else f"turns {first}-{last}"
                parts.append(
                    f'<rect class="cell {css}" x="{left + cell_w * (first - 1):.2f}" y="{y}" '
                    f'width="{cell_w * (last - first + 1):.2f}" height="{row_h - 3}">'
                    f"<title>{_esc(policy['name'])}, {_esc(span)}: {_esc(text)}</title></rect>"
                )
            parts.append("</g>")
        axis_y = top + plot_h
        parts.append(f'<line class="axis" x1="{left}" y1="{axis_y}" x2="{left + plot_w}" y2="{axis_y}"/>')
        for turn in _ticks(1, turns, 8):
            tx = left + cell_w * (turn - 0.5)
            parts.append(f'<text x="{tx:.1f}" y="{axis_y + 13}" text-anchor="middle">{turn}</text>')
        parts.append(
            f'<text class="axis-title" x="{left + plot_w / 2:.0f}" y="{axis_y + 30}" text-anchor="middle">turn</text>'
            f'<text class="axis-title" x="4" y="{axis_y + 30}">policy</text>'
        )
        parts.append("</svg>")
        out.append(f"<h4>{_esc(label)}</h4>{''.join(parts)}")
    return "".join(out)


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


def _table(columns: Sequence[tuple[str, str]], rows: Sequence[Mapping[str, str]], css: str = "") -> str:
    head = "".join(f"<th>{_esc(title)}</th>" for _, title in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_esc(row.get(key, '-'))}</td>" for key, _ in columns) + "</tr>" for row in rows
    )
    classes = f' class="{css}"' if css else ""
    return f"<table{classes}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _kit_section(kit: Mapping[str, Any]) -> str:
    return (
        '<section class="kit"><h2>compaction-conformance-kit</h2>'
        f"<p class=muted>{_esc(kit['kit'])} {_esc(kit['kit_version'])}: {_esc(kit['sessions'])}, "
        f"{kit['rounds']} rounds of compaction at a budget of {kit['budget_fraction']:.0%} "
        f"({_esc(kit['budget_unit'])}). Each lab policy's compacted text is the next request it would send; "
        f"tokens are {_esc(kit['tokens'])}. The kit's reference compactors run on the same sessions. "
        "Each lab policy is also asked every canary's direct question, as the kit probes a live agent: "
        "the kit's direct-recall check runs on what the model read before it answered (recalled text "
        "included, the question left out), and every call the question took is counted.</p>"
        f"{_table(KIT_COLUMNS, kit_rows(kit))}</section>"
    )


def render_html(data: Mapping[str, Any]) -> str:
    """The whole report as one HTML document (no script, no external resource)."""
    settings = data["settings"]
    exact = settings["tokenizer"] != "estimate"
    columns = [c for c in COLUMNS if exact or c[0] != "exact"]
    overview_columns, overview = overview_rows(data)
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>contextledger drift lab</title><style>{_STYLE}</style></head><body>",
        "<h1>contextledger drift lab</h1>",
        "<p>The same timelines under each context policy: what was sent, what it cost, what each policy kept, "
        "and what the context still held. Policies appear in the order they were run; the figures are "
        "measurements, not a verdict.</p>",
        "<p class=muted>"
        + _esc(
            f"model: {settings['model']} · tokens: {settings['estimate']}"
            + (f" and exact {settings['tokenizer']} counts" if exact else "")
            + f" · facts writer: {settings['writer']} · summary every {settings['summary_every']} turns"
            + (f" · answer probes: {settings['replicates']} replicate(s)" if settings["answer_probes"] else "")
        )
        + "</p>",
        '<section class="summary"><h2>Summary across timelines</h2>',
        "<p class=muted>Per policy and timeline: tokens sent (estimate, extra calls included); current values "
        "found in the context sent, out of the checks made; stale values sent (superseded, forgotten, evicted or "
        "rejected values found); answers to probe questions scored right (asked only of a live or local "
        "model).</p>",
        _table(overview_columns, overview, css="overview"),
        "</section>",
    ]
    if "kit" in data:
        out.append(_kit_section(data["kit"]))
    out.append(
        "<p class=muted>Probes read the text each model call received, decoded (JSON escapes undone), and "
        "never the library's own wording: from a facts block only the value fields are read. <b>current</b> "
        "values are those the facts contract holds (the latest declaration of each key, at most five, minus "
        "what was forgotten); <b>superseded</b> values were replaced by a later declaration; <b>evicted</b> "
        "values were dropped by the five-fact bound though never retracted; <b>rejected</b> values were in a "
        "message whose declarations the contract refused. Tokens sent count every message, the tool "
        "definitions offered and the extra calls; provider usage is shown as reported, or <i>unknown</i>. "
        "<b>kept</b> is the policy's stored history after the last turn.</p>"
    )
    for timeline in data["timelines"]:
        out.append(f'<section class="timeline" data-timeline="{_esc(timeline["name"])}">')
        out.append(f"<h2>{_esc(timeline['name'])}</h2>")
        if timeline["description"]:
            out.append(f"<p>{_esc(timeline['description'])}</p>")
        out.append(f"<p class=muted>{_esc(timeline['source'])} · {timeline['turns']} turns</p>")
        out.append(_table(columns, summary_rows(timeline)))
        answers = answer_rows(timeline)
        if answers:
            out.append("<h3>Answers to probe questions (exact match; reported beside the text checks)</h3>")
            out.append(_table(ANSWER_COLUMNS, answers))
        unit = "exact tokens" if exact else "tokens, estimate (chars/4)"
        out.append(
            f'<figure class="chart" data-chart="tokens"><figcaption>Tokens sent per turn ({_esc(unit)}; model and '
            "extra calls), one panel per policy, each on its own axis (the axes differ); a gap is a turn on "
            f"which nothing was sent</figcaption>{_tokens_chart(timeline, exact)}</figure>"
        )
        out.append(
            '<figure class="chart" data-chart="probes"><figcaption>Probe outcomes per turn. '
            '<span class=legend><span style="background:#2e7d32"></span>wanted (current value or prohibition '
            'present, old value absent)<span style="background:#c62828"></span>unwanted<span '
            'style="background:#ef6c00"></span>partly<span style="background:#e6e6e6"></span>nothing to look '
            'for<span style="background:#fff;border:1px solid #bbb"></span>nothing sent</span>'
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
