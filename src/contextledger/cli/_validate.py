"""``contextledger validate IN.jsonl``: what would make a transcript invalid to send (exit 1 if anything)."""

from __future__ import annotations

import argparse

from contextledger.cli._transcripts import read_transcript, transcript_label
from contextledger.messages import validate

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("validate", help="report what would make a transcript invalid to send")
    parser.add_argument("input", metavar="IN.jsonl", help="the transcript ('-' for standard input)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    messages = read_transcript(args.input)
    label = transcript_label(args.input)
    problems = validate(messages)
    if not problems:
        print(f"{label}: {len(messages)} messages, valid")
        return 0
    for problem in problems:
        print(f"{label}: {problem}")
    print(f"{label}: {len(problems)} problem(s) in {len(messages)} messages")
    return 1
