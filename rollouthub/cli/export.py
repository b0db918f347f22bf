"""``rollouthub export``: training data out of a store -- chat messages (SFT), triplets (RL), preference pairs,
per-rollout rewards or token-level trajectories (RL), as JSON Lines (default) or Parquet, in the layouts TRL reads
(see docs/export.md).

Exit status: 0 on success, 1 when the source cannot be used or read or an extra is missing, 2 for invalid arguments;
every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any, Optional, Sequence

from .sources import add_source_arguments, fail, run_reading, source_from_args

__all__ = ["main", "build_parser", "parse_time"]

_PROG = "rollouthub export"


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
    from rollouthub.export import EXPORT_FORMATS, FINISHED_STATUSES, TRIPLET_FIELDS
    from rollouthub.types.core import RolloutMode, RolloutStatus

    statuses = list(RolloutStatus.__args__)  # type: ignore[attr-defined]
    modes = list(RolloutMode.__args__)  # type: ignore[attr-defined]
    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="Export rollouts as training data in the layouts TRL reads: messages (chat SFT), triplets "
        "(prompt/completion per LLM call, for RL), preferences (prompt/chosen/rejected: two answers to one prompt), "
        "rewards (one line per rollout) or trajectories (token ids, masks and serving log-probabilities for RL). "
        "JSON Lines by default; Parquet with the [parquet] extra. Rows come in rollout start-time order; progress "
        "and a summary go to stderr.",
    )
    parser.add_argument("format", choices=EXPORT_FORMATS, help="What to export.")
    add_source_arguments(parser)
    out = parser.add_argument_group("output")
    out.add_argument(
        "-o",
        "--output",
        default="-",
        help="Output file (default: stdout, JSON Lines): .jsonl or .ndjson for JSON Lines, .parquet or .pq for "
        "Parquet; another extension needs --file-format.",
    )
    out.add_argument("--file-format", choices=["jsonl", "parquet"], help="Default: from the output's extension.")
    out.add_argument(
        "--dedupe",
        action="store_true",
        help="Drop rows whose content repeats an earlier row (messages: messages+tools; triplets: prompt+answer; "
        "preferences: prompt+chosen+rejected; trajectories: token ids+mask); the first stays.",
    )
    out.add_argument(
        "--triplet-fields",
        choices=TRIPLET_FIELDS,
        default="completion",
        help="triplets: TRL's prompt/completion names, completion = [assistant message] (default), or the answer "
        "as text in 'response' with 'response_token_ids'.",
    )
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
        help="preferences: every pair with different rewards (default) or best against worst, per prompt.",
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


def _fail(message: str, code: int) -> int:
    return fail(_PROG, message, code)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run ``rollouthub export``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.page_size < 1:
        return _fail("--page-size must be at least 1", 2)
    if args.level is not None and args.format != "trajectories":
        return _fail("--level applies to the trajectories format only", 2)

    from rollouthub.export import ExportSourceError, export_async
    from rollouthub.export.dedupe import RowDeduper
    from rollouthub.export.writers import file_format_of
    from rollouthub.utils.extras import MissingExtraError

    try:
        selection = _selection(args)
        file_format = file_format_of(args.output, args.file_format)
        if args.dedupe:
            RowDeduper(args.format)
        source = source_from_args(args)
    except ExportSourceError as exc:
        return _fail(str(exc), 1)
    except ValueError as exc:
        return _fail(str(exc), 2)
    if file_format == "parquet":
        from rollouthub.export.writers import parquet_schema

        try:
            parquet_schema(args.format)  # before any output: a missing extra is one line
        except MissingExtraError as exc:
            return _fail(str(exc), 1)
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

    async def read() -> Any:
        try:
            return await export_async(
                args.format,
                args.output,
                store_url=source.store_url,
                api_token=source.api_token,
                database=source.database,
                selection=selection,
                file_format=file_format,
                pairing=args.pairs,
                dedupe=args.dedupe,
                triplet_fields=args.triplet_fields,
                page_size=args.page_size,
                on_progress=on_progress,
                level=args.level or "trajectory",
            )
        finally:
            if started:
                progress.stop()

    summary, status = run_reading(_PROG, source, read, interrupted="interrupted; no file written")
    if summary is None:
        return status
    if not args.quiet:
        where = "stdout" if args.output == "-" else args.output
        print(f"Exported to {where}: {summary.describe()}.", file=sys.stderr)
    return 0
