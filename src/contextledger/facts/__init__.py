"""Controlled facts: a bounded working memory that holds only what the user explicitly declared.

A fact exists because the user wrote ``key=value`` in the current message, and carries the
exact quote that proves it, the turn and the time it was recorded.  A correction replaces its
key; ``forget`` really forgets, and starts a new epoch so that no late or pre-forget extraction
can bring anything back.  Facts are unverified user assertions: they are shown to a model as
labelled data and never authorise anything.

A turn with the default rule writer::

    store = FactStore()
    ticket = store.begin_turn("module=Billing; database=SQL Server 2022")
    admission = await extract(store, RuleWriter(), ticket)
    store.to_prompt_block()   # what the next model call is told

Around an agent: :class:`FactsProvider` (the block in the instructions, extraction after a
successful call) or :func:`run_with_facts` (the block in front of the message).
:class:`FactsDesk` shares one store between a main and a logs agent and forgets from both
histories; :class:`ChatLoop` is the ``contextledger chat`` loop around it.

The in-memory :class:`FactStore` vanishes with the process; :class:`RedisFactStore` (the
``redis`` extra, imported only when created) shares facts between processes, with an owner,
an optional expiry and ``forget`` as revocation.
"""

from contextledger.facts._block import EMPTY_BLOCK
from contextledger.facts._parse import parse_assertions
from contextledger.facts._provider import FactsProvider, FactsTurn, run_with_facts
from contextledger.facts._records import (
    ALLOWED_KEYS,
    MAX_EVIDENCE_CHARS,
    MAX_FACTS,
    MAX_MESSAGE_CHARS,
    MAX_VALUE_CHARS,
    Admission,
    Candidate,
    Fact,
    Forgotten,
    Ticket,
)
from contextledger.facts._redis import RedisFactStore
from contextledger.facts._repl import ChatLoop, build_desk
from contextledger.facts._router import DeskReply, FactsDesk, ForgetReport, is_logs_question, scrub_history
from contextledger.facts._store import FactMemory, FactStore
from contextledger.facts._writers import WRITER_INSTRUCTIONS, FactWriter, ModelWriter, Proposal, RuleWriter, extract

__all__ = [
    "ALLOWED_KEYS",
    "EMPTY_BLOCK",
    "MAX_EVIDENCE_CHARS",
    "MAX_FACTS",
    "MAX_MESSAGE_CHARS",
    "MAX_VALUE_CHARS",
    "WRITER_INSTRUCTIONS",
    "Admission",
    "Candidate",
    "ChatLoop",
    "DeskReply",
    "Fact",
    "FactMemory",
    "FactStore",
    "FactWriter",
    "FactsDesk",
    "FactsProvider",
    "FactsTurn",
    "ForgetReport",
    "Forgotten",
    "ModelWriter",
    "Proposal",
    "RedisFactStore",
    "RuleWriter",
    "Ticket",
    "build_desk",
    "extract",
    "is_logs_question",
    "parse_assertions",
    "run_with_facts",
    "scrub_history",
]
