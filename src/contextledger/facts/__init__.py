"""Controlled facts: a bounded working memory that holds only what the user explicitly declared.

A fact exists because the user wrote ``key=value`` in the current message (alone, or after
prose as in ``Sorry: database=SQL Server 2022``), and carries the exact quote that proves it,
the turn and the time it was recorded.  A correction replaces its key; ``forget`` really
forgets (the store, its trail and every history the model reads), and starts a new epoch so
that no late or pre-forget extraction can bring anything back.  Facts are unverified user
assertions: they are shown to a model as labelled data and never authorise anything.

A turn with the default rule writer::

    store = FactStore()
    ticket = store.begin_turn("Sorry, I was wrong: database=SQL Server 2022")
    admission = await extract(store, RuleWriter(), ticket)
    diagnose(ticket.user_text, admission=admission)   # what became of every '='
    store.to_prompt_block()                            # what the next model call is told

Around a model call: :class:`FactsHost` is the one turn every host runs (the agent runtime's
``FactsProvider`` and ``run_with_facts`` in :mod:`contextledger.agents`, the adapters in
:mod:`contextledger.integrations`, the proxy): the block before the call, the ticket taken
before it, the extraction after a successful one, with the writer on the store's own schema;
each turn's :class:`FactsTurn` carries its :class:`Diagnostic` list; :func:`forget_facts` forgets
from a store and any histories.  (The two-agent desk of ``contextledger chat`` is an application
of this memory and lives in :mod:`contextledger.demo`.)

Keys and bounds are a :class:`FactSchema` (the seed's by default).  :class:`FactStore` lives
in the process; :class:`SQLiteFactStore` (embedded), :class:`RedisFactStore` (the ``redis``
extra) and :class:`PostgresFactStore` (the ``postgres`` extra) persist, opt-in, with an owner, an
expiry, revocation and a review trail.

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.facts``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

- reading a message: ``_parse.py`` (design.md#declarations, :func:`parse_assertions`) and
  ``_diagnostics.py`` (:func:`diagnose`, :class:`Diagnostic`);
- the records and the schema: ``_records.py`` (:class:`Fact`, :class:`Candidate`,
  :class:`Ticket`, :class:`Admission`, :class:`Forgotten`), ``_schema.py`` (:class:`FactSchema`,
  the seed's :data:`DEFAULT_SCHEMA` with its :data:`ALLOWED_KEYS` and bounds :data:`MAX_FACTS`,
  :data:`MAX_VALUE_CHARS`, :data:`MAX_EVIDENCE_CHARS`, :data:`MAX_MESSAGE_CHARS`);
- the stores: ``_store.py`` (:class:`FactMemory`, the rules once, :class:`FactStore`),
  ``_admission.py`` (what a batch must pass), ``_trail.py`` (:class:`ReviewEvent`),
  ``_sqlite.py``, ``_redis.py``, ``_postgres.py``; the block: ``_block.py`` (:data:`EMPTY_BLOCK` when there are none,
  :func:`place_facts_block` puts it in a request where :data:`FactsPlacement` says);
- writers and the one turn: ``_writers.py`` (the :class:`FactWriter` protocol, :class:`RuleWriter`,
  :class:`ModelWriter` with its :data:`WRITER_INSTRUCTIONS`, the :class:`Proposal` a writer makes,
  :func:`extract`, :class:`StoreCall`), ``_turns.py`` (:class:`FactsHost`, :class:`FactsTurn`, and
  :class:`FactsWrite`, a turn's admission written in the turn's own atomic step);
- forgetting: ``_forget.py`` (:func:`forget_facts` and its :class:`ForgetReport`,
  :func:`scrub_history`, :class:`HistoryTarget` and :func:`history_target`);

This package imports nothing above it: the agent runtime's provider lives in
:mod:`contextledger.agents`, the adapters in :mod:`contextledger.integrations`.
"""

from typing import TYPE_CHECKING

from contextledger._deprecated import moved_name
from contextledger.facts._block import (
    FactsPlacement,
    place_facts_block,
)
from contextledger.facts._diagnostics import Diagnostic, diagnose
from contextledger.facts._forget import (
    ForgetReport,
    forget_facts,
    scrub_history,
)
from contextledger.facts._parse import parse_assertions
from contextledger.facts._postgres import PostgresFactStore
from contextledger.facts._records import (
    ALLOWED_KEYS,
    MAX_EVIDENCE_CHARS,
    MAX_FACTS,
    MAX_MESSAGE_CHARS,
    MAX_VALUE_CHARS,
    Admission,
    Fact,
    Forgotten,
)
from contextledger.facts._redis import RedisFactStore
from contextledger.facts._schema import DEFAULT_SCHEMA, FactSchema
from contextledger.facts._sqlite import SQLiteFactStore
from contextledger.facts._store import (
    FactStore,
)
from contextledger.facts._trail import ReviewEvent
from contextledger.facts._turns import (
    FactsHost,
    FactsTurn,
)
from contextledger.facts._writers import (
    FactWriter,
    ModelWriter,
    RuleWriter,
    extract,
)

__all__ = [
    "ALLOWED_KEYS",
    "DEFAULT_SCHEMA",
    "MAX_EVIDENCE_CHARS",
    "MAX_FACTS",
    "MAX_MESSAGE_CHARS",
    "MAX_VALUE_CHARS",
    "Admission",
    "Diagnostic",
    "Fact",
    "FactSchema",
    "FactStore",
    "FactWriter",
    "FactsHost",
    "FactsPlacement",
    "FactsTurn",
    "ForgetReport",
    "Forgotten",
    "ModelWriter",
    "PostgresFactStore",
    "RedisFactStore",
    "ReviewEvent",
    "RuleWriter",
    "SQLiteFactStore",
    "diagnose",
    "extract",
    "forget_facts",
    "parse_assertions",
    "place_facts_block",
    "scrub_history",
]

if not TYPE_CHECKING:
    # Names that were public here before and are internal now: still importable, with a
    # DeprecationWarning, until 0.6 (the release rule in CHANGELOG.md).
    _MOVED = {
        "Candidate": "contextledger.facts._records",
        "EMPTY_BLOCK": "contextledger.facts._block",
        "FactMemory": "contextledger.facts._store",
        "FactsWrite": "contextledger.facts._turns",
        "HistoryTarget": "contextledger.facts._forget",
        "Proposal": "contextledger.facts._writers",
        "StoreCall": "contextledger.facts._writers",
        "Ticket": "contextledger.facts._records",
        "WRITER_INSTRUCTIONS": "contextledger.facts._writers",
        "history_target": "contextledger.facts._forget",
    }

    def __getattr__(name: str) -> object:
        return moved_name(__name__, name, _MOVED)
