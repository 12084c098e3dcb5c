"""The combined policy: bounded facts for declared values, standing rules kept verbatim, a request view for the rest.

Each of the other policies does one thing well: the bounded facts hold the
latest declared value of each key and nothing superseded; a sliding-window
request view keeps the recent conversation and the full history on disk; and
nothing but the verbatim text keeps a prohibition intact.  This policy puts
the three together and is measured like every other one.

How it decides what to keep verbatim (a general rule of grammar, written for
no particular timeline or test suite): a line of a user message is a
*standing rule* when it is not a question and not a ``key=value``
declaration, and

1. it is a prohibition: a sentence opening with ``Never``, ``No`` or
   ``Only``, or containing ``never``, ``do not``/``don't``, ``must not``,
   ``may not``, ``cannot``/``can't`` or ``without ... approval/consent``;
2. or it states an obligation: ``must``, ``always``, ``required to``,
   ``have to``/``has to``;
3. or it is a conditional instruction: a sentence opening with ``If``,
   ``When``, ``Whenever`` or ``Unless`` (not a question);
4. or the user labelled it as one: it opens with a label before a colon whose
   last word names a kind of standing instruction (``rule``, ``constraint``,
   ``requirement``, ``policy``, ``restriction``, ``prohibition``,
   ``preference``, ``instruction``, ``guideline``), such as ``Rule:`` or
   ``Hard constraint:``;
5. or it states a preference: the words ``prefer``/``prefers``/``preference``.

A later rule that reads the same once every figure in it is masked (a token
holding a digit) replaces the earlier one: ``Budget cap is $300`` then ``Budget
cap is $700`` keeps only the second, so a restated rule never leaves its stale
figure behind.  The rules are shown to the model as the user's own text,
labelled unverified, and never authorise anything.

``forget`` reaches them like any fact: ``forget`` and ``forget constraint``
drop every kept rule; ``forget KEY`` drops the rules that mention the value it
forgot.  In every case the stored history is rewritten so that the forgotten
declarations and rules no longer appear in it (each replaced by a marker), so
the request view cannot send them again either.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from contextledger.agents import Agent, CompactionProvider, RunContext, use_context_providers
from contextledger.lab._contract import PROHIBITION_KEY
from contextledger.lab._policies import (
    SESSION_ID,
    AgentPolicy,
    FactsView,
    LabProvider,
    register_policy,
    sliding_window,
)
from contextledger.lab._timeline import HostCommand
from contextledger.messages import Message

__all__ = ["RULES_HEADING", "CombinedPolicy", "StandingRules", "is_standing_rule"]

RULES_HEADING = "Standing rules the user stated, word for word (unverified user text, not authorisation):"
FORGOTTEN_MARKER = "[forgotten at the user's request]"

_SENTENCE = re.compile(r"(?<=[.!])\s+")
_PROHIBITION = re.compile(
    r"^(never|no|only)\b|\b(never|do not|don't|must not|may not|cannot|can't)\b|\bwithout\b.*\b(approval|consent)\b",
    re.IGNORECASE,
)
_OBLIGATION = re.compile(r"\b(must|always|required to|have to|has to)\b", re.IGNORECASE)
_CONDITIONAL = re.compile(r"^(if|when|whenever|unless)\b", re.IGNORECASE)
_RULE_NOUNS = "rule|constraint|requirement|policy|restriction|prohibition|preference|instruction|guideline"
_LABEL = re.compile(rf"^[\w ]{{0,40}}?\b({_RULE_NOUNS})s?\s*:", re.IGNORECASE)
_PREFERENCE = re.compile(r"\b(prefer|prefers|preference)\b", re.IGNORECASE)
_FIGURE = re.compile(r"\S*\d\S*")


def _is_declaration(line: str) -> bool:
    key, equals, _ = line.partition("=")
    return bool(equals) and key.strip().isidentifier()


def is_standing_rule(line: str) -> bool:
    """Whether a line of user text is a standing rule, by the rule in the module docstring."""
    text = line.strip()
    if not text or text.endswith("?") or _is_declaration(text):
        return False
    if _LABEL.match(text) or _PREFERENCE.search(text):
        return True
    for part in _SENTENCE.split(text):
        sentence = part.strip()
        if not sentence or sentence.endswith("?"):
            continue
        if _PROHIBITION.search(sentence) or _OBLIGATION.search(sentence) or _CONDITIONAL.match(sentence):
            return True
    return False


def _shape(rule: str) -> str:
    """A rule with its figures masked: two rules of the same shape are one rule restated."""
    return " ".join(_FIGURE.sub("#", rule.lower()).split())


class StandingRules(LabProvider):
    """Keeps the user's standing rules verbatim and shows them to the model on every call.

    Rules are read from the user's own messages after a successful run (never
    from replies or injected context), as the facts provider reads declarations.
    """

    source_id = "standing_rules"

    def __init__(self) -> None:
        self.rules: list[str] = []

    def read(self, text: str) -> None:
        for line in text.splitlines():
            if not is_standing_rule(line):
                continue
            rule = line.strip()
            shape = _shape(rule)
            self.rules = [kept for kept in self.rules if _shape(kept) != shape]
            self.rules.append(rule)

    def block(self) -> str:
        return "\n".join([RULES_HEADING, *(f"- {rule}" for rule in self.rules)]) if self.rules else ""

    async def before_run(self, context: RunContext) -> None:
        context.add_instructions(self.block())

    async def after_run(self, context: RunContext) -> None:
        if self.frozen:
            return
        for message in context.input_messages:
            if message.role == "user":
                self.read(message.text)

    def forget(self, key: str | None, values: Sequence[str]) -> list[str]:
        """Drop the rules ``forget`` reaches; return them."""
        if key is None or key == PROHIBITION_KEY:
            dropped, self.rules = self.rules, []
        else:
            dropped = [rule for rule in self.rules if any(value in rule for value in values)]
            self.rules = [rule for rule in self.rules if rule not in dropped]
        return dropped


def _scrub(text: str, key: str | None, values: Sequence[str], rules: Sequence[str]) -> str:
    """A user message with forgotten declarations and rules replaced by a marker, the rest kept."""
    lines = []
    for line in text.splitlines():
        if line.strip() in rules:
            lines.append(FORGOTTEN_MARKER)
            continue
        segments = []
        for segment in re.split(r"(;)", line):
            name, equals, value = segment.partition("=")
            declared = name.strip().lower()
            forgotten = (
                equals and name.strip().isidentifier() and (key is None or declared == key or value.strip() in values)
            )
            segments.append(f" {FORGOTTEN_MARKER}" if forgotten else segment)
        lines.append("".join(segments))
    return "\n".join(lines)


def _scrubbed(message: Message, key: str | None, values: Sequence[str], rules: Sequence[str]) -> Message:
    if message.role == "user":
        return Message.user(_scrub(message.text, key, values, rules))
    words = [value for value in [*values, *rules] if len(value) >= 3]
    if (
        message.role == "assistant"
        and not message.function_calls
        and any(re.search(rf"(?<!\w){re.escape(value)}(?!\w)", message.text) for value in words)
    ):
        return Message.assistant(FORGOTTEN_MARKER)  # replaced whole, never partially redacted
    return message


class CombinedPolicy(AgentPolicy):
    """Bounded facts + standing rules in the instructions, and a sliding-window request view of the history."""

    def build(self) -> Agent:
        self.wording = (RULES_HEADING, FORGOTTEN_MARKER)
        self.facts = FactsView(self.setup, self.notes)
        self.standing = StandingRules()
        compaction = CompactionProvider(before_strategy=sliding_window())
        return self.agent_with(
            client=use_context_providers(self.setup.client, compaction), providers=[self.facts, self.standing]
        )

    async def host_command(self, command: HostCommand) -> None:
        removed = self.facts.forget(command.key)
        values = [fact.value for fact in removed]
        dropped = self.standing.forget(command.key, values)
        history = await self.stored.load(SESSION_ID)
        scrubbed = [_scrubbed(message, command.key, values, dropped) for message in history]
        if any(a is not b and a.text != b.text for a, b in zip(history, scrubbed)):
            await self.stored.replace(SESSION_ID, scrubbed)


register_policy(
    "combined",
    CombinedPolicy,
    description=(
        "the bounded facts block, the user's standing rules kept word for word, and the same sliding-window "
        "request view for the rest of the conversation"
    ),
)
