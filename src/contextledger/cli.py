"""The ``contextledger`` command line.

    contextledger compact IN.jsonl [-o OUT.jsonl | -o -] [--metadata] [--strategy NAME] [--param KEY=VALUE ...]
                          [--budget N]
    contextledger validate IN.jsonl
    contextledger lab [TIMELINE ...] [--model offline|openai:MODEL|local] [--policies NAME[,NAME...]]
                      [--tokenizer estimate|cl100k_base|o200k_base] [--html FILE] [--json FILE] [--replicates N]
                      [--kit]
    contextledger chat [--mode provider|manual] [--model offline|openai:MODEL|local] [--writer rules|model]
                       [--schema FILE] [--store PATH|redis://...] [--owner NAME] [--ttl SECONDS]
    contextledger facts list|history|revoke|expire --store PATH|redis://... [--owner NAME]

Transcripts are OpenAI-format messages: JSONL (one message per line), a JSON array, or a JSON
object with a "messages" array.  Errors are one line on stderr and a non-zero exit; no output
file is written unless the whole operation succeeded.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dataclasses
import inspect
import json
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from contextledger._cli_facts import register_facts_command
from contextledger.compaction import (
    CompactionResult,
    CompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    all_of,
    always,
    any_of,
    compact_with_report,
    groups_exceed,
    has_tool_calls,
    messages_exceed,
    never,
    tokens_below,
    tokens_exceed,
    turns_exceed,
)
from contextledger.exceptions import ConfigurationError, ContextLedgerError, TranscriptError
from contextledger.messages import Message, from_openai, load_jsonl, to_openai, validate, write_jsonl
from contextledger.serve import add_serve_command
from contextledger.tokenizers import Tokenizer, get_tokenizer

__all__ = ["main"]

STRATEGIES: dict[str, type[CompactionStrategy]] = {
    "truncation": TruncationStrategy,
    "sliding-window": SlidingWindowStrategy,
    "tool-result-collapse": ToolResultCompactionStrategy,
    "selective-tool-call": SelectiveToolCallCompactionStrategy,
}
_TRIGGER_FACTORIES = (all_of, always, any_of, groups_exceed, has_tool_calls, messages_exceed, never)
_TRIGGERS: dict[str, Callable[..., Any]] = {
    trigger.__name__: trigger for trigger in (*_TRIGGER_FACTORIES, tokens_below, tokens_exceed, turns_exceed)
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


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_transcript(path: str) -> list[Message]:
    """Messages from a file of OpenAI messages: JSONL, a JSON array, or ``{"messages": [...]}``.

    A file in none of these forms raises :class:`TranscriptError` naming the form found and
    what to write instead; no error ever quotes more than a short excerpt of the file.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise TranscriptError("no such file; check the path", path=path) from None
    except UnicodeDecodeError as error:
        raise TranscriptError(f"not UTF-8 text ({error.reason})", path=path) from None
    start = text.lstrip()[:1]
    if start in ("[", "{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None  # not one JSON document: read it as JSONL, which names the bad line
        if isinstance(data, dict) and "messages" in data:
            data = data["messages"]
            if not isinstance(data, list):
                raise TranscriptError('"messages" must be an array of message objects', path=path)
        if isinstance(data, list):
            try:
                return from_openai(data)
            except ContextLedgerError as error:
                raise TranscriptError(_shorten(str(error)), path=path) from None
        if isinstance(data, dict) and "role" not in data:
            keys = ", ".join(sorted(map(str, data))[:8])
            raise TranscriptError(
                f"a JSON object with keys {keys}, not a transcript; write JSONL (one message per line), a JSON "
                'array of messages, or an object with a "messages" array',
                path=path,
            )
    try:
        return load_jsonl(text.splitlines(), path=path)
    except TranscriptError as error:
        raise TranscriptError(_shorten(str(error))) from None


def _check_output(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"cannot write {path}: the folder {folder} does not exist; create it or choose another path")
    if os.path.isdir(path):
        raise UsageError(f"cannot write {path}: it is a folder; give a file name")


def _compact(args: argparse.Namespace) -> int:
    if args.budget is not None and args.budget < 1:
        raise UsageError(f"--budget must be a positive number of tokens, got {args.budget}")
    to_stdout = args.output == "-"
    if args.output and not to_stdout:
        _check_output(args.output)
    tokenizer = get_tokenizer(args.tokenizer)
    strategy = _build_strategy(args.strategy, args.param or [], args.budget, tokenizer)
    messages = read_transcript(args.input)
    problems = validate(messages)
    for problem in problems[:5]:
        print(f"warning: {args.input}: {problem}", file=sys.stderr)
    result = asyncio.run(compact_with_report(messages, strategy=strategy, tokenizer=tokenizer))
    # With the transcript on stdout, the report goes to stderr so the two never mix.
    report = sys.stderr if to_stdout else sys.stdout
    if to_stdout:
        for item in to_openai(result.messages, metadata=args.metadata):
            sys.stdout.write(json.dumps(item, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    elif args.output:
        write_jsonl(args.output, result.messages if args.metadata else _without_metadata(result.messages))
    print(f"{args.input}: {strategy!r}", file=report)
    print(_report(result, tokenizer), file=report)
    if to_stdout:
        print(f"wrote {len(result.messages)} messages to stdout", file=report)
    elif args.output:
        print(f"wrote {len(result.messages)} messages to {args.output}", file=report)
    else:
        print("no transcript written: add -o OUT.jsonl, or -o - to print it", file=report)
    return 0


def _without_metadata(messages: Sequence[Message]) -> list[Message]:
    """The messages as a model would receive them: no id and no private properties, so the
    file holds plain OpenAI messages (what ``to_openai`` sends) and no ``_contextledger`` key."""
    return [dataclasses.replace(message, message_id=None, additional_properties={}) for message in messages]


def _validate(args: argparse.Namespace) -> int:
    messages = read_transcript(args.input)
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
    from contextledger._cli_facts import open_store  # noqa: PLC0415
    from contextledger.facts._repl import ChatLoop, build_desk  # noqa: PLC0415

    store = open_store(args.store, owner=args.owner, schema_file=args.schema, ttl_seconds=args.ttl)
    desk = build_desk(mode=args.mode, model=args.model, writer=args.writer, store=store)
    return ChatLoop(desk, sys.stdout).run(sys.stdin)


def _version() -> str:
    try:
        return metadata.version("contextledger")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contextledger", description="Control what an agent sends to its model.")
    parser.add_argument("--version", action="version", version=f"contextledger {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    compact = commands.add_parser(
        "compact",
        help="compact an OpenAI-format transcript",
        description='Compact a transcript (JSONL, a JSON array, or {"messages": [...]}) and report what changed.',
    )
    compact.add_argument("input", metavar="IN.jsonl")
    compact.add_argument(
        "-o", "--output", metavar="OUT.jsonl", help="write the compacted transcript here as JSONL ('-' for stdout)"
    )
    compact.add_argument(
        "--metadata",
        action="store_true",
        help='keep contextledger\'s private "_contextledger" key (ids, summary marks) in the output',
    )
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
    chat.add_argument(
        "--schema", metavar="FILE", help='a JSON schema of keys and bounds: {"keys": [...], "max_facts": 5}'
    )
    chat.add_argument(
        "--store",
        metavar="PATH|URL",
        help="keep facts in a SQLite file or a redis:// URL (default: in memory, gone when the chat ends)",
    )
    chat.add_argument("--owner", default="chat", help="whose facts, in a --store shared by several (default: chat)")
    chat.add_argument("--ttl", type=float, metavar="SECONDS", help="facts expire this long after they are recorded")
    chat.set_defaults(run=_chat)
    register_facts_command(commands)
    add_serve_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:  # no command: say what there is, not an error
        parser.print_help()
        return 0
    try:
        code: int = args.run(args)
    except (UsageError, ContextLedgerError, ConfigurationError, OSError) as error:
        print(f"contextledger: error: {error}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
