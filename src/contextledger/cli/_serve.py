"""``contextledger serve``: the proxy's command, registered by :mod:`contextledger.serve` itself.

Its flags are read into a :class:`~contextledger.serve.ServeConfig` beside the configuration file
they mirror, so the serve package keeps them; nothing here imports the ``serve`` extra.
"""

from __future__ import annotations

import argparse

from contextledger.serve import add_serve_command

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_serve_command(commands)
