"""What every quickstart mode gets from the shared run (console, store, data paths) and hands back to it."""

from __future__ import annotations

import argparse
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

__all__ = ["Outcome", "QuickstartError", "Session", "UsageError"]


class QuickstartError(RuntimeError):
    """The run cannot start or go on; the message is one line, printed without a traceback (exit 1)."""

    exit_code = 1


class UsageError(QuickstartError):
    """A flag's value cannot be used (a SQLite file in a missing directory, ...): one line, exit 2."""

    exit_code = 2


@dataclass
class Session:
    """The shared parts of a run: set up by ``main`` before the mode runs, torn down by it afterwards.

    ``stack`` closes with the run: a mode registers there what it starts (servers, environment changes).
    """

    args: argparse.Namespace
    console: Any
    stack: ExitStack
    store_url: str
    data: str
    """Where the data goes, for messages: a SQLite file's path or a PostgreSQL URL (password hidden)."""
    log_path: str


@dataclass(frozen=True)
class Outcome:
    """What a finished training mode reports: for the summary line ``Trained in ...`` and ``--summary-json``."""

    elapsed: float
    rollouts_this_run: int
    summary: Dict[str, Any] = field(default_factory=dict)
    """What the mode printed at the end, as JSON values (written by ``--summary-json``)."""
    failure: Optional[str] = None
    """Set when the run finished without reaching its goal: printed as a one-line error after the summary (exit 1)."""
