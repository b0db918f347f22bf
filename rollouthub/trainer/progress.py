"""The progress line of ``Trainer.fit``: finished, running and queued rollouts and the rate, every few seconds.

It runs next to the algorithm (in the algorithm's process and event loop) and reads the store's counts: one
``query_rollouts(status_in=..., limit=0)`` per status group, which the stores answer with a count and no rows.

Where it goes, decided when the run starts:

* to the ``rollouthub.trainer.progress`` logger (INFO) when logging is configured to show INFO records from it (e.g.
  ``rollouthub.setup_logging()``): one log line per interval;
* otherwise to standard error: on a terminal a single line updated in place every second, elsewhere (a file, a CI
  log, a captured test) one plain line per interval.

Nothing is written before the first interval has passed, so short runs (and most tests) print nothing; once a line
was shown, a last one with the final counts is written when the run ends. ``Trainer(progress=False)`` turns it off.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional, Sequence, TextIO, Tuple, Union

from rollouthub.execution.base import AlgorithmBundle
from rollouthub.execution.events import ExecutionEvent
from rollouthub.store.base import LightningStore
from rollouthub.types import RolloutStatus

__all__ = [
    "ProgressLine",
    "ProgressSetting",
    "RolloutCounts",
    "format_progress",
    "progress_line_from",
    "read_rollout_counts",
    "with_progress_line",
]

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_SECONDS = 5.0
"""Seconds between two progress lines (log or plain output)."""

TERMINAL_REFRESH_SECONDS = 1.0
"""Seconds between two updates of the in-place line on a terminal (at most the interval)."""

_GROUPS: Sequence[Sequence[RolloutStatus]] = (
    ("queuing", "requeuing"),
    ("preparing", "running"),
    ("succeeded",),
    ("failed", "cancelled"),
)


@dataclass(frozen=True)
class RolloutCounts:
    """How many rollouts of a store are in each stage."""

    queued: int
    running: int
    succeeded: int
    failed: int
    """Failed or cancelled."""

    @property
    def finished(self) -> int:
        """Succeeded, failed or cancelled."""
        return self.succeeded + self.failed


async def read_rollout_counts(store: LightningStore) -> RolloutCounts:
    """Count the store's rollouts per stage (four ``query_rollouts(..., limit=0)`` calls: counts, no rows)."""
    totals = [(await store.query_rollouts(status_in=list(group), limit=0)).total for group in _GROUPS]
    return RolloutCounts(queued=totals[0], running=totals[1], succeeded=totals[2], failed=totals[3])


def format_progress(counts: RolloutCounts, start: RolloutCounts, elapsed: float, *, final: bool = False) -> str:
    """One progress line; finished counts are those of this run (``counts`` minus the ``start`` counts)."""
    finished = counts.finished - start.finished
    failed = counts.failed - start.failed
    rate = finished / elapsed if elapsed > 0 else 0.0
    head = "Done" if final else "Progress"
    failed_text = f" ({failed} failed)" if failed else ""
    return (
        f"{head}: {finished} rollouts finished{failed_text}, {counts.running} running, {counts.queued} queued"
        f" | {rate:.2f} rollouts/s | {elapsed:.0f}s elapsed"
    )


def _logging_shows_info(target: logging.Logger) -> bool:
    """Whether an INFO record of ``target`` reaches a handler that emits it (the logging module's own walk)."""
    if not target.isEnabledFor(logging.INFO):
        return False
    current: Optional[logging.Logger] = target
    while current is not None:
        if any(handler.level <= logging.INFO for handler in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or exotic streams
        return False


class ProgressLine:
    """Periodic progress of a run, from the store's counts (see the module docstring for where it goes).

    Args:
        interval: seconds between two lines (a terminal's in-place line is refreshed every second).
        stream: write here instead of choosing between logging and standard error (a terminal stream gets the
            in-place line).

    Raises:
        ValueError: ``interval`` is not a positive number.
    """

    def __init__(self, interval: float = DEFAULT_INTERVAL_SECONDS, stream: Optional[TextIO] = None) -> None:
        """Validate and remember the settings."""
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
            raise ValueError(f"progress interval must be a positive number of seconds, got {interval!r}")
        self.interval = float(interval)
        self.stream = stream

    def __repr__(self) -> str:
        return f"ProgressLine(interval={self.interval!r})"

    @asynccontextmanager
    async def watch(self, store: LightningStore) -> AsyncIterator[None]:
        """Show the progress of ``store``'s rollouts while the block runs (in the running event loop)."""
        started = time.monotonic()
        try:
            start = await read_rollout_counts(store)
        except Exception:  # the progress line must never break the run
            logger.debug("Cannot read the store's rollout counts; no progress line.", exc_info=True)
            yield
            return
        stop = asyncio.Event()
        task = asyncio.create_task(self._report(store, stop, start, started), name="trainer-progress")
        try:
            yield
        finally:
            stop.set()
            try:
                await task
            except Exception:  # the progress line must never break or mask the run
                logger.debug("The progress line failed.", exc_info=True)

    async def _report(self, store: LightningStore, stop: asyncio.Event, start: RolloutCounts, started: float) -> None:
        """Write a line every period until ``stop`` is set, then the final line if any was written."""
        write, period = self._output()
        counts = start
        shown = False
        while True:
            try:
                await asyncio.wait_for(stop.wait(), timeout=period)
                break
            except asyncio.TimeoutError:
                pass
            try:
                counts = await read_rollout_counts(store)
            except Exception:
                logger.debug("Cannot read the store's rollout counts.", exc_info=True)
                continue
            write(format_progress(counts, start, time.monotonic() - started), False)
            shown = True
        if not shown:
            return
        try:
            counts = await read_rollout_counts(store)
        except Exception:  # the store may be closing: report the last counts read
            logger.debug("Cannot read the final rollout counts.", exc_info=True)
        write(format_progress(counts, start, time.monotonic() - started, final=True), True)

    def _output(self) -> Tuple[Callable[[str, bool], None], float]:
        """``(write(line, final), seconds between two lines)``."""
        if self.stream is None and _logging_shows_info(logger):
            return (lambda line, final: logger.info(line)), self.interval
        explicit = self.stream

        def stream() -> TextIO:
            return explicit if explicit is not None else sys.stderr  # looked up at write time (redirections)

        if _is_terminal(stream()):

            def rewrite(line: str, final: bool) -> None:
                out = stream()
                out.write("\r\x1b[2K" + line + ("\n" if final else ""))
                out.flush()

            return rewrite, min(self.interval, TERMINAL_REFRESH_SECONDS)

        def append(line: str, final: bool) -> None:
            out = stream()
            out.write(line + "\n")
            out.flush()

        return append, self.interval


ProgressSetting = Union[bool, float, ProgressLine, None]
"""What ``Trainer(progress=...)`` accepts: ``True`` (default settings), ``False``/``None`` (off), an interval in
seconds, or a :class:`ProgressLine`."""


def progress_line_from(setting: Any) -> Optional[ProgressLine]:
    """The :class:`ProgressLine` for a ``Trainer(progress=...)`` value (``None``: off).

    Raises:
        ValueError: a number that is not positive, or a value of another type.
    """
    if setting is None or setting is False:
        return None
    if setting is True:
        return ProgressLine()
    if isinstance(setting, ProgressLine):
        return setting
    if isinstance(setting, (int, float)):
        return ProgressLine(interval=setting)
    raise ValueError(
        f"progress must be True, False, a positive number of seconds or a ProgressLine, got {type(setting).__name__}"
    )


async def _run_with_progress(
    bundle: AlgorithmBundle, progress: ProgressLine, store: LightningStore, event: ExecutionEvent
) -> None:
    async with progress.watch(store):
        await bundle(store, event)


def with_progress_line(bundle: AlgorithmBundle, progress: Optional[ProgressLine]) -> AlgorithmBundle:
    """Wrap an algorithm bundle ``(store, event)`` so that ``progress`` reports on the store while it runs (a
    picklable partial, for strategies that start the algorithm in another process)."""
    if progress is None:
        return bundle
    return functools.partial(_run_with_progress, bundle, progress)
