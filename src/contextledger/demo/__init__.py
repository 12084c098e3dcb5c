"""The seed's demo: two agents sharing one store of controlled facts, and the chat loop around them.

It is an application of the library, not part of it: :mod:`contextledger.facts` is the memory,
:mod:`contextledger.agents` the runtime, and this package wires them into the desk that
``contextledger chat`` runs.  Read it as an example of both working together.

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.demo``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

- ``_desk.py``: :class:`FactsDesk`, a main agent and a logs agent with separate sessions and one
  fact store, in either :data:`Mode` (``provider`` or ``manual``); host commands
  (:data:`COMMANDS`: ``mem``, ``forget KEY``, ``forget``, ``quit``) handled without a model call;
  :class:`DeskReply`, what the desk did with one line; :func:`is_logs_question`, the default route;
- ``_chat.py``: :class:`ChatLoop`, the desk read from any text stream (a terminal, a pipe, a
  test's script), and :func:`build_desk`, the desk ``contextledger chat`` builds from its flags.

>>> from contextledger.clients import OfflineModel
>>> from contextledger.demo import FactsDesk
>>> desk = FactsDesk.create(OfflineModel())
"""

from contextledger.demo._chat import ChatLoop, build_desk
from contextledger.demo._desk import COMMANDS, DeskReply, FactsDesk, Mode, is_logs_question

__all__ = ["COMMANDS", "ChatLoop", "DeskReply", "FactsDesk", "Mode", "build_desk", "is_logs_question"]
