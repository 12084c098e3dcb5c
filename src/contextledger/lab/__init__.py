"""The drift lab: the same fixed timelines under several context policies, measured side by side.

For every policy and turn the lab records what was sent to the model, what it
cost (a characters/4 estimate, exact counts with an OpenAI tokenizer, and the
usage the provider reported or ``unknown``), the extra calls a policy makes
(the facts writer, the summariser) and deterministic probes of the context
sent: is each current fact's value there, is a superseded or forgotten value
still there, has the prohibition survived.  It compares; it does not judge.

>>> from contextledger.clients import OfflineModel
>>> from contextledger.lab import load_timelines, run_lab_sync
>>> report = run_lab_sync(load_timelines(), OfflineModel)          # doctest: +SKIP

The timeline file format is described in :mod:`contextledger.lab._timeline`
(and in ``timelines/README.md`` beside the shipped timelines).
"""

from contextledger.lab._calls import CallRecord, RecordingClient, ToolBox
from contextledger.lab._policies import (
    SUMMARY_LIMIT,
    AgentPolicy,
    ContextPolicy,
    PolicySetup,
    PolicySpec,
    get_policy,
    policy_names,
    register_policy,
    unregister_policy,
)
from contextledger.lab._probes import Expectation, ProbeOutcome, check_context, expectations, final_state
from contextledger.lab._report import render_html
from contextledger.lab._run import FORMAT, LabReport, LabSettings, run_lab, run_lab_sync
from contextledger.lab._timeline import (
    SCHEMA_VERSION,
    HostCommand,
    Timeline,
    ToolSpec,
    Turn,
    load_timeline,
    load_timelines,
    parse_timeline,
    shipped_timeline_paths,
)

__all__ = [
    "FORMAT",
    "SCHEMA_VERSION",
    "SUMMARY_LIMIT",
    "AgentPolicy",
    "CallRecord",
    "ContextPolicy",
    "Expectation",
    "HostCommand",
    "LabReport",
    "LabSettings",
    "PolicySetup",
    "PolicySpec",
    "ProbeOutcome",
    "RecordingClient",
    "Timeline",
    "ToolBox",
    "ToolSpec",
    "Turn",
    "check_context",
    "expectations",
    "final_state",
    "get_policy",
    "load_timeline",
    "load_timelines",
    "parse_timeline",
    "policy_names",
    "register_policy",
    "render_html",
    "run_lab",
    "run_lab_sync",
    "shipped_timeline_paths",
    "unregister_policy",
]
