"""``contextledger validate IN``: what the provider would refuse in a transcript or request body (exit 1 if anything).

With ``--format chat`` (the default) ``IN`` is a transcript in any form ``compact`` reads, checked
as the ``messages`` of a chat-completions body.  With ``--format responses`` or ``--format
anthropic`` it is one whole request body as JSON, as a client would send it: for the Responses API
an object with ``input`` (and ``previous_response_id`` or ``conversation`` when it continues a
stored response), for Anthropic's Messages API an object with ``messages`` (and ``system`` and
``tools`` when given).  Each problem is one line naming its position, its rule and what to change.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any, Literal, cast

from contextledger._json import UnwritableJSONError, strict_loads
from contextledger.cli._common import read_text
from contextledger.cli._transcripts import read_transcript, transcript_label
from contextledger.exceptions import TranscriptError
from contextledger.messages import Problem, problems_for, to_openai

__all__ = ["register"]

FORMATS = ("chat", "responses", "anthropic")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "validate",
        help="report what the provider would refuse in a transcript or request body",
        description=(
            "Report what the provider would refuse. --format chat (the default) reads a transcript "
            '(JSONL, a JSON array, or {"messages": [...]}); --format responses reads a whole Responses '
            'API body ({"input": [...], ...}); --format anthropic a whole Messages API body '
            '({"messages": [...], "system": ..., "tools": [...]}).'
        ),
    )
    parser.add_argument("input", metavar="IN", help="the transcript or body ('-' for standard input)")
    parser.add_argument("--format", choices=FORMATS, default="chat", help="the API whose rules apply (default: chat)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    api = cast(Literal["chat", "responses", "anthropic"], args.format)
    label = transcript_label(args.input)
    body = {"messages": to_openai(read_transcript(args.input))} if api == "chat" else read_body(args.input)
    problems = problems_for(api, body)
    size = _size(api, body)
    if not problems:
        print(f"{label}: {size}, valid")
        return 0
    noun = "item" if api == "responses" else "message"
    for problem in problems:
        print(f"{label}: {_where(problem, noun)}: {problem.code}: {problem.detail}")
    print(f"{label}: {len(problems)} problem(s) in {size}")
    return 1


def read_body(path: str) -> Mapping[str, Any]:
    """One request body from a JSON file (``-`` for standard input), refused in one line if it is
    not a JSON object, so the rules only ever see a body."""
    label = transcript_label(path)
    text = read_text(path, what="the body")
    try:
        body = strict_loads(text)
    except UnwritableJSONError as error:
        raise TranscriptError(f"not JSON that can be written back: {error}", path=label) from None
    except ValueError as error:
        raise TranscriptError(f"not one JSON document ({error}); give the request body as JSON", path=label) from None
    if not isinstance(body, dict):
        raise TranscriptError(
            f"a JSON {type(body).__name__}, not a request body; give the whole body as one JSON object", path=label
        )
    return body


def _size(api: str, body: Mapping[str, Any]) -> str:
    listed = body.get("input" if api == "responses" else "messages")
    if isinstance(listed, str):
        return "a string input"
    count = len(listed) if isinstance(listed, list) else 0
    return f"{count} {'items' if api == 'responses' else 'messages'}"


def _where(problem: Problem, noun: str) -> str:
    return "body" if problem.index < 0 else f"{noun} {problem.index}"
