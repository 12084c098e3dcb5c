"""Agent Framework's own compaction tests, run against contextledger's strategies and grouping.

    python benchmarks/maf_upstream.py path/to/agent-framework/python/packages/core/tests/core/test_compaction.py
    python benchmarks/maf_upstream.py path/to/test_compaction.py --maf    # the same file against MAF itself

MAF's suite (``microsoft/agent-framework``, public) is not shipped in its wheel, so give the path
of a checkout's ``test_compaction.py``.  The file is copied to a scratch folder with its two
imports (``from agent_framework import (...)`` and ``from agent_framework._compaction import
(...)``) pointed at a stand-in module that rebinds the names contextledger replaces:

- the strategies, ``CharacterEstimatorTokenizer`` and ``apply_compaction``, from
  ``contextledger.integrations.maf``;
- the grouping: ``annotate_message_groups``, ``extend_compaction_messages`` and
  ``append_compaction_message`` let MAF write its annotations (message ids, token counts, the
  excluded flag), then overwrite each message's group id, group index, kind and reasoning flag
  with contextledger's :class:`MessageIndex` grouping (a unit of groups is one MAF group).

Everything else (MAF's message type, its private helpers, ``included_messages``) stays MAF's.
Tests of MAF's exact error wording, log wording, private constants and its JSON token counts
fail by design; behaviours are what the run is for.  It prints the pass and fail counts and
the failing tests; the exit status is pytest's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

STAND_IN = '''"""MAF's compaction test names, rebound to contextledger where it replaces MAF."""
from typing import Any

import agent_framework._compaction as maf_compaction
from agent_framework import *  # noqa: F403
from agent_framework import (
    GROUP_ANNOTATION_KEY,
    GROUP_HAS_REASONING_KEY,
    GROUP_ID_KEY,
    GROUP_INDEX_KEY,
    GROUP_KIND_KEY,
)
from agent_framework._compaction import *  # noqa: F403
from agent_framework._compaction import _select_summary_input_groups, _serialize_message  # noqa: F401

from contextledger.compaction import MessageIndex
from contextledger.integrations.maf import (  # noqa: F401
    CharacterEstimatorTokenizer,
    ContextWindowCompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowStrategy,
    SummarizationStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    apply_compaction,
    from_maf_message,
)
from contextledger.messages import ReasoningContent


def annotate_message_groups(messages: list[Any], **kwargs: Any) -> list[str]:
    maf_compaction.annotate_message_groups(messages, **kwargs)
    ours = [from_maf_message(message, position=position) for position, message in enumerate(messages)]
    where = {id(message): position for position, message in enumerate(ours)}
    units: dict[int, tuple[str, int]] = {}
    for group in MessageIndex(ours).groups:
        root = group.unit[0]
        if id(root) not in units:
            units[id(root)] = (f"contextledger_group_{where[id(root.messages[0])]}", len(units))
        group_id, number = units[id(root)]
        reasoning = any(
            isinstance(content, ReasoningContent)
            for member in group.unit
            for message in member.messages
            for content in message.contents
        )
        for message in group.messages:
            properties = messages[where[id(message)]].additional_properties
            annotation = properties.setdefault(GROUP_ANNOTATION_KEY, {})
            annotation[GROUP_ID_KEY] = group_id
            annotation[GROUP_INDEX_KEY] = number
            annotation[GROUP_KIND_KEY] = group.kind.value
            annotation[GROUP_HAS_REASONING_KEY] = reasoning
    return [group_id for group_id, _ in units.values()]


def extend_compaction_messages(messages: list[Any], new: Any, **kwargs: Any) -> list[str]:
    maf_compaction.extend_compaction_messages(messages, new, **kwargs)
    return annotate_message_groups(messages, force_reannotate=True, tokenizer=kwargs.get("tokenizer"))


def append_compaction_message(messages: list[Any], message: Any, **kwargs: Any) -> list[str]:
    return extend_compaction_messages(messages, [message], **kwargs)
'''

# MAF's async tests, run without a pytest plugin (the project's environment has none).
CONFTEST = """import asyncio
import inspect

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        names = pyfuncitem._fixtureinfo.argnames
        asyncio.run(pyfuncitem.obj(**{name: pyfuncitem.funcargs[name] for name in names}))
        return True
    return None
"""

IMPORTS = ("from agent_framework import (", "from agent_framework._compaction import (")


def prepare(tests: Path, folder: Path, *, maf: bool) -> Path:
    """The test file in ``folder``, its imports pointed at the stand-in (unless ``maf``)."""
    text = tests.read_text()
    if not maf:
        missing = [line for line in IMPORTS if line not in text]
        if missing:
            raise SystemExit(f"{tests}: no line {missing[0]!r}; the stand-in cannot be put in its place")
        for line in IMPORTS:
            text = text.replace(line, "from maf_stand_in import (")
        (folder / "maf_stand_in.py").write_text(STAND_IN)
    (folder / "conftest.py").write_text(CONFTEST)
    copy = folder / "test_upstream_compaction.py"
    copy.write_text(text)
    return copy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tests", type=Path, help="MAF's python/packages/core/tests/core/test_compaction.py")
    parser.add_argument("--maf", action="store_true", help="run the file unchanged, against MAF itself")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        copy = prepare(args.tests, folder, maf=args.maf)
        command = [sys.executable, "-m", "pytest", str(copy), "-q", "-p", "no:cacheprovider", "--tb=no", "-rf"]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    lines = done.stdout.splitlines()
    for line in lines:
        if line.startswith("FAILED") or " passed" in line or " failed" in line or "error" in line.lower():
            print(line)
    if done.returncode not in (0, 1):
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
