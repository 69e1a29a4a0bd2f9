"""``python -m padkit``: the ``padkit`` command (see :mod:`padkit.cli`)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
