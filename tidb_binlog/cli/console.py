"""The rich console every command prints through.

On a terminal it is rich's default. Anywhere else (a pipe, a test, the log of a Ray Job)
lines are never hard-wrapped: a message cut at column 80 cannot be found with grep, and
table names in a summary must not be cut either.
"""

from __future__ import annotations

import sys

from rich.console import Console


def make_console() -> Console:
    if sys.stdout.isatty():
        return Console()
    return Console(width=160, soft_wrap=True)
