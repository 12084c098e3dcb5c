"""Optional extras imported on use, with one error when one is missing.

Every integration (Redis, the OpenAI client, the exact tokenizer, the local model, Microsoft Agent
Framework, and any adapter added later) imports its package through :func:`require_extra`, so a
missing package always raises :class:`~contextledger.exceptions.MissingExtraError` naming the
feature and the exact ``pip install`` line, whichever extra it is.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from contextledger.exceptions import MissingExtraError

__all__ = ["require_extra"]


def require_extra(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` saying ``feature`` needs ``extra``.

    Only a missing package is turned into that error: an extra that is installed but fails while
    importing (a broken build, a version clash) raises its own error, which is the one to read.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        top = module.partition(".")[0]
        if error.name is not None and error.name.partition(".")[0] != top:
            raise  # the package is there but one of *its* dependencies is not
        raise MissingExtraError(feature=feature, extra=extra, module=module) from error
