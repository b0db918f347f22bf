"""``rollouthub inspect``: what a store holds -- counts, the most recent rollouts and the final reward per resources
version -- for a database (``--db``) or a running store server (``--store``), as tables or ``--json``.

Exit status: 0 on success, 1 when the source cannot be used or read, 2 for invalid arguments; every error is one
line on stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any, Optional, Sequence

from .sources import add_source_arguments, fail, run_reading, source_from_args

__all__ = ["main", "build_parser", "render_overview"]

_PROG = "rollouthub inspect"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rollouthub inspect``."""
    from rollouthub.export.overview import DEFAULT_RECENT
    from rollouthub.types.core import RolloutMode

    modes = list(RolloutMode.__args__)  # type: ignore[attr-defined]
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Show what a store holds: rollouts by status, attempts, spans, resources versions and "
        "workers; the most recent rollouts (status, mode, resources id, final reward, start time, duration); and "
        "the final reward of the finished rollouts per resources version (count, mean, min, max, in first-seen "
        "order).",
    )
    add_source_arguments(parser)
    parser.add_argument(
        "--recent",
        type=int,
        default=DEFAULT_RECENT,
        metavar="N",
        help=f"How many recent rollouts to list (default: {DEFAULT_RECENT}; 0: none).",
    )
    parser.add_argument(
        "--mode", nargs="+", choices=modes, metavar="MODE", help=f"Rewards of these modes only ({', '.join(modes)})."
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON object instead of tables.")
    return parser


def _fail(message: str, code: int) -> int:
    return fail(_PROG, message, code)


def _number(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _when(epoch: Optional[float]) -> str:
    return "-" if epoch is None else dt.datetime.fromtimestamp(epoch).strftime("%m-%d %H:%M:%S")


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:04.1f}s" if minutes < 60 else f"{int(minutes // 60)}h{int(minutes % 60):02d}m"


def render_overview(overview: Any, description: str, console: Any) -> None:
    """Print ``overview`` (a :class:`~rollouthub.export.overview.StoreOverview`) as rich tables on ``console``."""
    from rich.table import Table

    console.print(f"[bold]{description}[/bold]")
    statuses = ", ".join(f"{n} {status}" for status, n in overview.rollouts_by_status.items() if n)
    workers = ", ".join(f"{n} {status}" for status, n in overview.workers_by_status.items())
    counts = Table(title="Counts", title_justify="left", show_header=False)
    counts.add_column("what")
    counts.add_column("count", justify="right")
    counts.add_column("detail")
    counts.add_row("rollouts", str(overview.rollouts), statuses)
    counts.add_row("attempts", "-" if overview.attempts is None else str(overview.attempts), "")
    counts.add_row("spans", "-" if overview.spans is None else str(overview.spans), "")
    counts.add_row("resources versions", str(overview.resources), "")
    counts.add_row("workers", str(overview.workers), workers)
    console.print(counts)
    if overview.recent:
        recent = Table(title=f"Recent rollouts ({len(overview.recent)})", title_justify="left")
        recent.add_column("rollout", overflow="fold")  # ids are never cut: a narrow terminal wraps them
        recent.add_column("status")
        recent.add_column("mode")
        recent.add_column("resources", overflow="fold")
        recent.add_column("reward", justify="right")
        recent.add_column("started", no_wrap=True)
        recent.add_column("duration", justify="right", no_wrap=True)
        for item in overview.recent:
            recent.add_row(
                item.rollout_id,
                item.status,
                item.mode or "-",
                item.resources_id or "-",
                _number(item.reward),
                _when(item.start_time),
                _duration(item.duration) + ("" if item.end_time is not None else " (running)"),
            )
        console.print(recent)
    scope = f" ({', '.join(overview.mode_in)} rollouts)" if overview.mode_in else ""
    if not overview.rewards_by_resources:
        console.print(f"No finished rollouts{scope}: no rewards to show.")
        return
    rewards = Table(title=f"Final reward per resources version{scope}", title_justify="left")
    rewards.add_column("resources", overflow="fold")
    for name in ("finished", "rewarded", "mean", "min", "max"):
        rewards.add_column(name, justify="right")
    for version in overview.rewards_by_resources:
        rewards.add_row(
            version.resources_id or "(none)",
            str(version.rollouts),
            str(version.rewarded),
            _number(version.mean),
            _number(version.min),
            _number(version.max),
        )
    console.print(rewards)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``rollouthub inspect``; returns the exit status."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.recent < 0:
        return _fail("--recent must be 0 or more", 2)

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from rollouthub.export import ExportSourceError, open_source
    from rollouthub.export.overview import store_overview

    try:
        source = source_from_args(args)
    except ExportSourceError as exc:
        return _fail(str(exc), 1)
    except ValueError as exc:
        return _fail(str(exc), 2)
    errors = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]reading rewards"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("finished rollouts"),
        console=errors,
        transient=True,
        disable=not errors.is_terminal,
    )
    task = progress.add_task("rewards", total=None)

    def on_progress(done: int, total: int) -> None:
        progress.update(task, completed=done, total=max(total, done))

    async def read() -> Any:
        async with open_source(store_url=source.store_url, api_token=source.api_token, database=source.database) as s:
            with progress:
                return await store_overview(s, recent=args.recent, mode_in=args.mode, on_progress=on_progress)

    overview, status = run_reading(_PROG, source, read)
    if overview is None:
        return status
    if args.json:
        print(json.dumps({"source": source.description, **overview.as_dict()}, indent=2))
    else:
        console = Console()
        if not console.is_terminal:  # a file or a pipe: wide enough for whole ids on one line
            console = Console(width=160)
        render_overview(overview, source.description, console)
    return 0
