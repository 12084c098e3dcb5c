"""``python -m contextledger.cli``, the same as the ``contextledger`` command."""

from contextledger.cli import main

raise SystemExit(main())
