"""``rollouthub export``: training data out of a store -- chat messages (SFT), triplets (RL), preference pairs,
per-rollout rewards or token-level trajectories (RL), as JSONL (default) or Parquet.

Exit status: 0 on success, 1 when the source cannot be read or an extra is missing, 2 for invalid arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
from typing import Any, Optional, Sequence

__all__ = ["main", "build_parser", "parse_time"]

_DEFAULT_DATABASE = "rollouthub.db"


def parse_time(text: str) -> float:
    """Epoch seconds from ``1733200000``, ``2026-12-03`` or ``2026-12-03T14:05:00`` (local time unless it has an
    offset)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch seconds nor an ISO date/time (e.g. 2026-12-03 or 2026-12-03T14:05)"
        ) from None
    return moment.timestamp()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rollouthub export``."""
    from rollouthub.export import EXPORT_FORMATS, FINISHED_STATUSES
    from rollouthub.types.core import RolloutMode, RolloutStatus

    statuses = list(RolloutStatus.__args__)  # type: ignore[attr-defined]
    modes = list(RolloutMode.__args__)  # type: ignore[attr-defined]
    parser = argparse.ArgumentParser(
        prog="rollouthub export",
        description="Export rollouts as training data: messages (chat SFT), triplets (RL), preferences "
        "(chosen/rejected pairs), rewards (one line per rollout) or trajectories (token ids, masks and serving "
        "log-probabilities for RL). JSONL by default; Parquet with the [parquet] extra. Rows come in rollout "
        "start-time order; progress and a summary go to stderr.",
    )
    parser.add_argument("format", choices=EXPORT_FORMATS, help="What to export.")
    source = parser.add_argument_group("source (default: --db ./rollouthub.db)")
    source.add_argument("--store", metavar="URL", help="A running store server, e.g. http://127.0.0.1:4747.")
    source.add_argument("--api-token", help="Bearer token for --store (default: $ROLLOUTHUB_API_TOKEN).")
    source.add_argument("--db", metavar="PATH_OR_URL", help="A SQLite file or a sqlite:// / postgresql:// URL.")
    out = parser.add_argument_group("output")
    out.add_argument("-o", "--output", default="-", help="Output file (default: stdout). .parquet selects Parquet.")
    out.add_argument("--file-format", choices=["jsonl", "parquet"], help="Default: from the output's extension.")
    select = parser.add_argument_group("selection (combined with AND)")
    select.add_argument(
        "--status",
        nargs="+",
        choices=statuses,
        default=list(FINISHED_STATUSES),
        metavar="STATUS",
        help=f"Rollout statuses (default: {' '.join(FINISHED_STATUSES)}; any of {', '.join(statuses)}).",
    )
    select.add_argument("--mode", nargs="+", choices=modes, metavar="MODE", help=f"Rollout modes ({', '.join(modes)}).")
    select.add_argument("--resources-id", nargs="+", metavar="ID", help="Resources ids (prompt/model versions).")
    select.add_argument("--rollout-id", nargs="+", metavar="ID", help="Only these rollouts.")
    select.add_argument("--since", type=parse_time, metavar="TIME", help="Started at or after (epoch s or ISO).")
    select.add_argument("--until", type=parse_time, metavar="TIME", help="Started at or before (epoch s or ISO).")
    select.add_argument("--min-reward", type=float, metavar="R", help="Final reward at least R.")
    select.add_argument("--max-reward", type=float, metavar="R", help="Final reward at most R.")
    parser.add_argument(
        "--pairs",
        choices=["all", "best-worst"],
        default="all",
        help="preferences: every pair with different rewards (default) or best against worst per input.",
    )
    parser.add_argument(
        "--level",
        choices=["trajectory", "transition"],
        help="trajectories: one row per trajectory, consecutive LLM calls of an attempt merged (default), or one "
        "row per LLM call (transition).",
    )
    parser.add_argument("--page-size", type=int, default=200, help="Rollouts per store query (default: 200).")
    parser.add_argument("-q", "--quiet", action="store_true", help="No progress bar and no summary.")
    return parser


def _selection(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from rollouthub.export import ExportSelection

    fields = {
        "status_in": args.status,
        "mode_in": args.mode,
        "resources_id_in": args.resources_id,
        "rollout_id_in": args.rollout_id,
        "since": args.since,
        "until": args.until,
        "min_reward": args.min_reward,
        "max_reward": args.max_reward,
    }
    try:
        return ExportSelection(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:  # a rule across fields; the message names them
            raise ValueError(
                message.replace("min_reward", "--min-reward").replace("max_reward", "--max-reward")
            ) from None
        flag = "--" + str(error["loc"][0]).removesuffix("_in").replace("_", "-")
        raise ValueError(f"{flag}: {message}") from None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``rollouthub export``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.store and args.db:
        parser.error("give either --store or --db, not both")
    if args.page_size < 1:
        parser.error("--page-size must be at least 1")
    if args.level is not None and args.format != "trajectories":
        parser.error("--level applies to the trajectories format only")
    try:
        selection = _selection(args)
    except ValueError as exc:
        parser.error(str(exc))
    database = None if args.store else (args.db or _DEFAULT_DATABASE)
    if database == _DEFAULT_DATABASE and not os.path.exists(database):
        print(
            f"rollouthub export: error: no database at ./{_DEFAULT_DATABASE}; pass --db PATH or --store URL",
            file=sys.stderr,
        )
        return 1

    from rollouthub.export import ExportSourceError, export_async
    from rollouthub.utils.extras import MissingExtraError

    file_format = args.file_format or ("parquet" if args.output.endswith((".parquet", ".pq")) else "jsonl")
    if file_format == "parquet":
        from rollouthub.export.writers import parquet_schema

        try:
            parquet_schema(args.format)  # before any output: a missing extra is one line
        except MissingExtraError as exc:
            print(f"rollouthub export: error: {exc}", file=sys.stderr)
            return 1
    progress: Any = None
    task: Any = None
    if not args.quiet:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(
            TextColumn(f"[bold]export {args.format}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("rollouts"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        task = progress.add_task("export", total=None)

    started = False

    def on_progress(done: int, total: int) -> None:
        nonlocal started
        if progress is None:
            return
        if not started:  # after the first page: a source that cannot be read prints its error line alone
            progress.start()
            started = True
        progress.update(task, completed=done, total=max(total, done))

    try:
        try:
            summary = asyncio.run(
                export_async(
                    args.format,
                    args.output,
                    store_url=args.store,
                    api_token=args.api_token,
                    database=database,
                    selection=selection,
                    file_format=file_format,
                    pairing=args.pairs,
                    page_size=args.page_size,
                    on_progress=on_progress,
                    level=args.level or "trajectory",
                )
            )
        finally:
            if started:
                progress.stop()
    except (MissingExtraError, ExportSourceError) as exc:
        print(f"rollouthub export: error: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"rollouthub export: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rollouthub export: interrupted; no file written", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - a store that cannot be reached or read: one line, no traceback
        print(f"rollouthub export: error: cannot read the source: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        where = "stdout" if args.output == "-" else args.output
        print(f"Exported to {where}: {summary.describe()}.", file=sys.stderr)
    return 0
