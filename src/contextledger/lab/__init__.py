"""The drift lab: the same fixed timelines under several context policies, measured side by side.

For every policy and turn the lab records what was sent to the model, what it
cost (a characters/4 estimate, exact counts with an OpenAI tokenizer, and the
usage the provider reported or ``unknown``), the extra calls a policy makes
(the facts writer, the summariser), what the policy keeps between turns, and
deterministic probes of the decoded context sent: is each current fact's value
there, is a superseded, forgotten or rejected value still there, has the
prohibition survived.  With a live or local model it also asks probe questions
and scores the answers, reported beside the text checks.  It compares; it does
not judge.

>>> from contextledger.clients import OfflineModel
>>> from contextledger.lab import load_timelines, run_lab_sync
>>> report = run_lab_sync(load_timelines(), OfflineModel)          # doctest: +SKIP

The timeline file format is described in :mod:`contextledger.lab._timeline`
(and in ``timelines/README.md`` beside the shipped timelines).  A policy of
your own follows :class:`ContextPolicy` (or subclasses :class:`AgentPolicy`)
and is made available with :func:`register_policy`.

Where things live (the public names, those in ``__all__``, are imported from here,
``contextledger.lab``; the other names below are plumbing the library's packages share, each listed
in its own module's ``__all__``):

- timelines, ``_timeline.py``: :class:`Timeline`, :func:`load_timeline`, :func:`load_timelines`
  (the shipped ones by default), :func:`shipped_timeline_paths`, :func:`parse_timeline`,
  :func:`unique_timelines` (no two with one name);
- policies, ``_policies.py``: :class:`ContextPolicy`, :class:`AgentPolicy`, the
  :class:`PolicySetup` each is built from, and the registry (:func:`register_policy`,
  :func:`unregister_policy`, :func:`get_policy`, :func:`policy_names`); the combined policy is
  ``_combined.py``;
- running and measuring, ``_run.py``: :func:`run_lab`, :func:`run_lab_sync`, their
  :class:`LabSettings` and the :class:`LabReport` they return; every model call goes through the
  recorder in ``_calls.py``; what each turn should hold is ``_contract.py``, and the checks of
  what it did hold are ``_probes.py``;
- reports, ``_report.py``: :func:`render_html` and the summary table every format shares; the
  terminal report (a progress bar and tables, with ``rich``) is :mod:`contextledger.lab.terminal`,
  imported only by whoever prints it, so ``import contextledger.lab`` never loads ``rich``;
- compaction-conformance-kit's checks against policies, ``_kit.py``: :func:`run_kit` (the ``kit``
  extra).
"""

from contextledger.lab import _combined as _combined  # registers the combined policy after the six others
from contextledger.lab._kit import run_kit
from contextledger.lab._policies import (
    AgentPolicy,
    ContextPolicy,
    PolicySetup,
    get_policy,
    policy_names,
    register_collapse_recall,
    register_policy,
    unregister_policy,
)
from contextledger.lab._report import render_html
from contextledger.lab._run import LabReport, LabSettings, run_lab, run_lab_sync
from contextledger.lab._timeline import (
    Timeline,
    load_timeline,
    load_timelines,
    parse_timeline,
    shipped_timeline_paths,
    unique_timelines,
)

register_collapse_recall()  # after the combined policy: the earlier ones keep their place in reports

__all__ = [
    "AgentPolicy",
    "ContextPolicy",
    "LabReport",
    "LabSettings",
    "PolicySetup",
    "Timeline",
    "get_policy",
    "load_timeline",
    "load_timelines",
    "parse_timeline",
    "policy_names",
    "register_policy",
    "render_html",
    "run_kit",
    "run_lab",
    "run_lab_sync",
    "shipped_timeline_paths",
    "unique_timelines",
    "unregister_policy",
]
