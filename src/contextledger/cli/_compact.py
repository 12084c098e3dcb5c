"""``contextledger compact IN.jsonl``: compact a transcript and report what changed.

The strategy comes from ``--strategy`` and ``--param`` (read by
:func:`~contextledger.compaction.strategy_from_spec`, as the proxy reads its own) and/or
``--budget``.  ``IN.jsonl`` may be ``-`` (standard input) and ``-o -`` prints the transcript; the
report then goes to standard error so the two never mix.  Nothing is written unless the whole
operation succeeded.

A transcript the provider would refuse (the rules ``contextledger validate`` reports) is not
compacted: what compaction made of it would be refused too, so the command names the problems and
exits 1 writing nothing.  ``--force`` compacts it anyway, with the problems as warnings.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import Sequence

from contextledger.cli._common import STANDARD_STREAM, TOKENIZERS, UsageError, check_output
from contextledger.cli._transcripts import read_transcript, transcript_label
from contextledger.compaction import SPEC_STRATEGIES, CompactionResult, compact_with_report, strategy_from_spec
from contextledger.messages import Message, chat_problems, to_openai, write_jsonl
from contextledger.tokenizers import Tokenizer, get_tokenizer

__all__ = ["register"]

SHOWN_PROBLEMS = 5
"""The problems of an invalid transcript named on standard error; ``validate`` lists them all."""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "compact",
        help="compact an OpenAI-format transcript",
        description='Compact a transcript (JSONL, a JSON array, or {"messages": [...]}) and report what changed.',
    )
    parser.add_argument("input", metavar="IN.jsonl", help="the transcript ('-' for standard input)")
    parser.add_argument(
        "-o", "--output", metavar="OUT.jsonl", help="write the compacted transcript here as JSONL ('-' for stdout)"
    )
    parser.add_argument(
        "--metadata",
        action="store_true",
        help='keep contextledger\'s private "_contextledger" key (ids, summary marks) in the output',
    )
    parser.add_argument("--strategy", metavar="NAME", help=f"one of {', '.join(SPEC_STRATEGIES)}")
    parser.add_argument(
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="a strategy argument, e.g. keep_last_groups=20 or trigger=tokens_exceed(2000)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        metavar="N",
        help="fit N tokens: collapse old tool results, then drop oldest groups (or wrap --strategy)",
    )
    parser.add_argument("--tokenizer", default="estimate", choices=TOKENIZERS)
    parser.add_argument(
        "--force",
        action="store_true",
        help="compact a transcript that breaks the provider's rules anyway (its problems become warnings)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # The flags are checked by name first, so a mistake names the flag a user typed.
    if args.budget is not None and args.budget < 1:
        raise UsageError(f"--budget must be a positive number of tokens, got {args.budget}")
    if args.strategy is None and args.param:
        raise UsageError("--param needs --strategy")
    if args.strategy is None and args.budget is None:
        raise UsageError("give --strategy NAME or --budget N")
    to_stdout = args.output == STANDARD_STREAM
    if args.output:
        check_output(args.output)
    tokenizer = get_tokenizer(args.tokenizer)
    strategy = strategy_from_spec(args.strategy, args.param or (), budget=args.budget, tokenizer=tokenizer)
    messages = read_transcript(args.input)
    label = transcript_label(args.input)
    problems = chat_problems({"messages": to_openai(messages)})
    if problems and not args.force:
        for problem in problems[:SHOWN_PROBLEMS]:
            print(f"contextledger: {label}: {problem}", file=sys.stderr)
        print(
            f"contextledger: {label}: {len(problems)} problem(s) make it invalid to send, and its compaction would "
            f"be too; nothing written (fix them, see contextledger validate {args.input}, or add --force)",
            file=sys.stderr,
        )
        return 1
    for problem in problems[:SHOWN_PROBLEMS]:
        print(f"warning: {label}: {problem}", file=sys.stderr)
    result = asyncio.run(compact_with_report(messages, strategy=strategy, tokenizer=tokenizer))
    report = sys.stderr if to_stdout else sys.stdout
    if to_stdout:
        for item in to_openai(result.messages, metadata=args.metadata):
            sys.stdout.write(json.dumps(item, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    elif args.output:
        write_jsonl(args.output, result.messages if args.metadata else _without_metadata(result.messages))
    print(f"{label}: {strategy!r}", file=report)
    print(_report(result, tokenizer), file=report)
    if to_stdout:
        print(f"wrote {len(result.messages)} messages to stdout", file=report)
    elif args.output:
        print(f"wrote {len(result.messages)} messages to {args.output}", file=report)
    else:
        print("no transcript written: add -o OUT.jsonl, or -o - to print it", file=report)
    return 0


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


def _without_metadata(messages: Sequence[Message]) -> list[Message]:
    """The messages as a model would receive them: no id and no private properties, so the
    file holds plain OpenAI messages (what ``to_openai`` sends) and no ``_contextledger`` key."""
    return [dataclasses.replace(message, message_id=None, additional_properties={}) for message in messages]
