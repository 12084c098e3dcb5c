"""The ``contextledger`` command line.

    contextledger compact IN.jsonl [-o OUT.jsonl] [--strategy NAME] [--param KEY=VALUE ...] [--budget N]
    contextledger validate IN.jsonl
    contextledger lab [TIMELINE ...] [--model offline|openai:MODEL|local] [--policies NAME[,NAME...]]
                      [--tokenizer estimate|cl100k_base|o200k_base] [--html FILE] [--json FILE] [--replicates N]
                      [--kit]
    contextledger chat [--mode provider|manual] [--model offline|openai:MODEL|local] [--writer rules|model]

Transcripts are OpenAI-format JSONL, one message per line.  Errors are one
line on stderr and a non-zero exit; no output file is written unless the whole
operation succeeded.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import inspect
import sys
from collections.abc import Callable, Sequence
from typing import Any

from contextledger.compaction import triggers as trigger_module
from contextledger.compaction._apply import CompactionResult, compact_messages
from contextledger.compaction._strategies import (
    CompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
)
from contextledger.exceptions import ConfigurationError, ContextLedgerError
from contextledger.messages import read_jsonl, validate, write_jsonl
from contextledger.tokenizers import Tokenizer, get_tokenizer

__all__ = ["main"]

STRATEGIES: dict[str, type[CompactionStrategy]] = {
    "truncation": TruncationStrategy,
    "sliding-window": SlidingWindowStrategy,
    "tool-result-collapse": ToolResultCompactionStrategy,
    "selective-tool-call": SelectiveToolCallCompactionStrategy,
}
_TRIGGERS: dict[str, Callable[..., Any]] = {
    name: getattr(trigger_module, name) for name in trigger_module.__all__ if name != "Trigger"
}


class UsageError(Exception):
    """A command-line mistake, reported in one line."""


def _parse_trigger(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int)
    ):
        return -node.operand.value  # rejected by the trigger itself, with a clear message
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _TRIGGERS
        and not node.keywords
    ):
        return _TRIGGERS[node.func.id](*(_parse_trigger(arg, text) for arg in node.args))
    raise UsageError(
        f"cannot read trigger {text!r}; write e.g. tokens_exceed(2000) or all_of(has_tool_calls(), turns_exceed(4)) "
        f"using {', '.join(sorted(_TRIGGERS))}"
    )


def _parse_value(key: str, raw: str) -> Any:
    if key in ("trigger", "target"):
        try:
            tree = ast.parse(raw, mode="eval")
        except SyntaxError:
            raise UsageError(f"cannot read {key} {raw!r}; write e.g. tokens_exceed(2000)") from None
        return _parse_trigger(tree.body, raw)
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(raw.replace("_", ""))
    except ValueError:
        return raw


def _build_strategy(
    name: str | None, params: Sequence[str], budget: int | None, tokenizer: Tokenizer
) -> CompactionStrategy:
    kwargs: dict[str, Any] = {}
    for item in params:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--param {item!r} is not KEY=VALUE")
        kwargs[key] = _parse_value(key, raw)
    if name is None:
        if kwargs:
            raise UsageError("--param needs --strategy")
        if budget is None:
            raise UsageError("give --strategy NAME or --budget N")
        return TokenBudgetComposedStrategy(
            token_budget=budget,
            tokenizer=tokenizer,
            strategies=[ToolResultCompactionStrategy(keep_last_tool_call_groups=1)],
        )
    if name == "summarization":
        raise UsageError("summarization needs a chat model; it is available from Python, not from `compact`")
    cls = STRATEGIES.get(name)
    if cls is None:
        raise UsageError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "formatter")]
    for key in kwargs:
        if key not in accepted:
            raise UsageError(f"{name} has no parameter {key!r}; it accepts {', '.join(accepted)}")
    if "tokenizer" in accepted and ("max_n" in kwargs or "compact_to" in kwargs) and "tokenizer" not in kwargs:
        kwargs["tokenizer"] = tokenizer
    elif kwargs.get("tokenizer") is not None:
        kwargs["tokenizer"] = get_tokenizer(str(kwargs["tokenizer"]))
    strategy = cls(**kwargs)
    if budget is not None:
        return TokenBudgetComposedStrategy(token_budget=budget, tokenizer=tokenizer, strategies=[strategy])
    return strategy


def _report(result: CompactionResult, tokenizer: Tokenizer) -> str:
    label = " (estimate)" if tokenizer.is_estimate else ""
    b, a = result.before, result.after
    lines = [
        f"{'':10}{'before':>10}{'after':>10}",
        f"{'groups':10}{b['included_groups']:>10}{a['included_groups']:>10}",
        f"{'messages':10}{b['included_messages']:>10}{a['included_messages']:>10}",
        f"{'turns':10}{b['included_turns']:>10}{a['included_turns']:>10}",
        f"{'tokens':10}{b['included_tokens']:>10}{a['included_tokens']:>10}  {tokenizer.name}{label}",
    ]
    if not result.events:
        lines.append("nothing to do: the strategy's trigger did not fire")
    for event in result.events:
        lines.append(
            f"{event.strategy}: {event.action} {event.messages} messages, {event.tokens} tokens ({event.detail})"
        )
    return "\n".join(lines)


def _compact(args: argparse.Namespace) -> int:
    tokenizer = get_tokenizer(args.tokenizer)
    strategy = _build_strategy(args.strategy, args.param or [], args.budget, tokenizer)
    messages = read_jsonl(args.input)
    problems = validate(messages)
    for problem in problems[:5]:
        print(f"warning: {args.input}: {problem}", file=sys.stderr)
    result = asyncio.run(compact_messages(messages, strategy=strategy, tokenizer=tokenizer))
    if args.output:
        write_jsonl(args.output, result.messages)
    print(f"{args.input}: {strategy!r}")
    print(_report(result, tokenizer))
    if args.output:
        print(f"wrote {len(result.messages)} messages to {args.output}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    messages = read_jsonl(args.input)
    problems = validate(messages)
    if not problems:
        print(f"{args.input}: {len(messages)} messages, valid")
        return 0
    for problem in problems:
        print(f"{args.input}: {problem}")
    print(f"{args.input}: {len(problems)} problem(s) in {len(messages)} messages")
    return 1


def _lab(args: argparse.Namespace) -> int:
    # The lab and rich are imported here so that the other commands start without them.
    from contextledger.lab._cli import run_lab_command  # noqa: PLC0415

    return run_lab_command(args)


def _chat(args: argparse.Namespace) -> int:
    # Imported here so that the other commands start without the agent runtime.
    from contextledger.facts import ChatLoop, build_desk  # noqa: PLC0415

    desk = build_desk(mode=args.mode, model=args.model, writer=args.writer)
    return asyncio.run(ChatLoop(desk, sys.stdout).run(sys.stdin))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contextledger", description="Control what an agent sends to its model.")
    commands = parser.add_subparsers(dest="command", required=True)
    compact = commands.add_parser("compact", help="compact an OpenAI-format JSONL transcript")
    compact.add_argument("input", metavar="IN.jsonl")
    compact.add_argument("-o", "--output", metavar="OUT.jsonl", help="write the compacted transcript here")
    compact.add_argument("--strategy", metavar="NAME", help=f"one of {', '.join(STRATEGIES)}")
    compact.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="a strategy argument, e.g. keep_last_groups=20 or trigger=tokens_exceed(2000)",
    )
    compact.add_argument(
        "--budget",
        type=int,
        metavar="N",
        help="fit N tokens: collapse old tool results, then drop oldest groups (or wrap --strategy)",
    )
    compact.add_argument("--tokenizer", default="estimate", choices=["estimate", "cl100k_base", "o200k_base"])
    compact.set_defaults(run=_compact)
    check = commands.add_parser("validate", help="report what would make a transcript invalid to send")
    check.add_argument("input", metavar="IN.jsonl")
    check.set_defaults(run=_validate)
    lab = commands.add_parser(
        "lab",
        help="compare context policies on fixed timelines (the drift lab)",
        description=(
            "Replay timelines under each context policy and report what was sent, what it cost and which facts "
            "the context still held. Without TIMELINE, every shipped timeline runs. Runs offline by default."
        ),
    )
    lab.add_argument("timelines", nargs="*", metavar="TIMELINE", help="timeline JSON files (default: the shipped ones)")
    lab.add_argument("--model", default="offline", help="offline (default), local, or openai:MODEL")
    lab.add_argument(
        "--policies",
        action="append",
        metavar="NAME[,NAME...]",
        help="policies to run, in this order, comma-separated or repeated (default: all): full-history, "
        "last-3-turns, summary, bounded-facts, request-view, reduced-history, combined",
    )
    lab.add_argument("--tokenizer", default="estimate", choices=["estimate", "cl100k_base", "o200k_base"])
    lab.add_argument("--html", metavar="FILE", help="write the self-contained HTML report here")
    lab.add_argument("--json", metavar="FILE", help="write the full measurements as JSON here")
    lab.add_argument(
        "--replicates",
        type=int,
        default=1,
        metavar="N",
        help="with a live model, ask each probe question N times (answers vary)",
    )
    lab.add_argument(
        "--writer",
        default="model",
        choices=["model", "rules"],
        help="how bounded facts are extracted: a structured-output call to the model (default) or parsing rules",
    )
    lab.add_argument(
        "--kit",
        action="store_true",
        help="also run compaction-conformance-kit's checks against each policy (needs the kit extra)",
    )
    lab.set_defaults(run=_lab)
    chat = commands.add_parser(
        "chat",
        help="talk to two agents that share controlled facts (mem, forget KEY, forget, quit)",
        description=(
            "An interactive desk: a main agent and a logs agent with separate sessions share one store of "
            "key=value facts. Commands are handled here and never sent to a model. Runs offline by default."
        ),
    )
    chat.add_argument("--mode", default="provider", choices=["provider", "manual"], help="how facts reach the model")
    chat.add_argument("--model", default="offline", help="offline (default), local, or openai:MODEL")
    chat.add_argument(
        "--writer",
        default="rules",
        choices=["rules", "model"],
        help="how facts are extracted: parsing rules (default, no model call) or a structured-output model call",
    )
    chat.set_defaults(run=_chat)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except (UsageError, ContextLedgerError, ConfigurationError, OSError) as error:
        print(f"contextledger: error: {error}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
