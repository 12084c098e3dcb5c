"""``contextledger serve``: compaction and controlled facts for any OpenAI client, through one base URL.

An OpenAI-compatible proxy between any client and any OpenAI-compatible upstream.  Stateless by
default (the client's whole history is compacted and forwarded, nothing stored); with a session
header it keeps the history and the facts (design.md#proxy)::

    from contextledger.serve import ServeConfig, create_app
    app = create_app(ServeConfig(upstream="http://127.0.0.1:8000/v1"))   # any ASGI server runs it

:class:`ServeConfig` holds every setting (a :class:`StrategySpec` for each strategy it names;
:data:`DEFAULT_STRATEGY` is what it compacts with unless told otherwise) and
:func:`add_serve_command` adds ``serve`` to the command line's parser.  Importing this package
needs no optional extra; :func:`create_app` needs the ``serve`` extra
(starlette, uvicorn, aiohttp) and raises :class:`MissingExtraError` without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from contextledger.serve._command import add_serve_command
from contextledger.serve._config import DEFAULT_STRATEGY, ServeConfig, StrategySpec

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["DEFAULT_STRATEGY", "ServeConfig", "StrategySpec", "add_serve_command", "create_app"]


def create_app(config: ServeConfig) -> Starlette:
    """The proxy as an ASGI application (see :mod:`contextledger.serve._app`)."""
    from contextledger.serve._app import create_app as build  # noqa: PLC0415

    return build(config)
