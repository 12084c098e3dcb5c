"""contextledger inside the OpenAI Agents SDK (the ``openai-agents`` extra).

- **Items** convert both ways (:func:`from_responses`, :func:`to_responses`): Responses API input
  items (messages, ``function_call`` / ``function_call_output``, reasoning items, hosted tool
  calls) become contextledger messages and come back as the very same items.  Parallel
  ``function_call`` items become one assistant message, so compaction keeps them and all their
  outputs together; a reasoning item becomes a reasoning-only message, which joins the group of
  the item it precedes, so a reasoning item is never sent without it.  Hosted calls become
  :class:`~contextledger.messages.HostedCallContent`: a self-contained one (web or file search,
  code interpreter, image generation, an MCP call) with its outcome as a
  :class:`~contextledger.messages.HostedResultContent` in the same message, one answered by an
  output item of its own (computer, shell, local shell, apply-patch) with that output as a
  result in the next message, paired by id as function calls are; an MCP approval request and
  its response become the approval contents; a custom tool call and its output are a function
  call and result.  What contextledger has no field for (ids, status, actions, encrypted
  reasoning...) is kept in the reserved property :data:`RESPONSES_PROPERTY`.  A contextledger
  message with several kinds of content (reasoning, text and calls) becomes one item per kind,
  in order.
- **Sessions**: :class:`ContextLedgerSession` is the SDK's ``Session`` over any contextledger
  history (in memory, SQLite, Redis); :class:`CompactingSession` answers ``get_items()`` with
  the request view (what a strategy would send) while the store keeps every item, and its
  ``input_filter`` (``RunConfig.call_model_input_filter``) compacts every model call of a run,
  the items a long tool loop adds inside it included.
- **Controlled facts**: :class:`AgentsFacts` puts the facts block into the instructions of each
  model call, extracts from the run's own user input after a successful run, and forgets from
  the store and from sessions.

Where things live (every name is imported from here): the conversion is
:mod:`contextledger.messages`' (the proxy's ``/v1/responses`` reads items with it too), re-exported
here; ``_sessions.py`` (the two sessions), ``_facts.py`` (:class:`AgentsFacts`).
"""

from contextledger._extras import require_extra

# Checked first, so a missing extra says what to install before any submodule imports it.
require_extra("agents", extra="openai-agents", feature="contextledger.integrations.openai_agents")

from contextledger.integrations.openai_agents._facts import AgentsFacts  # noqa: E402
from contextledger.integrations.openai_agents._sessions import CompactingSession, ContextLedgerSession  # noqa: E402
from contextledger.messages import from_responses, to_responses  # noqa: E402
from contextledger.messages._responses import RESPONSES_PROPERTY  # noqa: E402

__all__ = [
    "RESPONSES_PROPERTY",
    "AgentsFacts",
    "CompactingSession",
    "ContextLedgerSession",
    "from_responses",
    "to_responses",
]
