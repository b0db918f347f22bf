"""Export what agents did as training data: ``rollouthub export`` and :func:`export` (issue 18).

Formats (one row per line in JSONL, or Parquet with the ``[parquet]`` extra):

* ``messages`` -- one row per rollout (per conversation, for agents that hold several): chat ``messages`` with tool
  calls and ``tools`` in the OpenAI fine-tuning layout, the final ``reward``, ids, the rollout ``input``; loadable as a
  chat SFT dataset;
* ``triplets`` -- one row per LLM call: ``prompt`` (chat messages), ``response`` (text), ``prompt_token_ids`` /
  ``response_token_ids`` when recorded (e.g. through the LLM proxy), the call's ``reward``, the rollout's
  ``final_reward``, ``step`` index and ids -- for RL;
* ``preferences`` -- for each input with two or more finished rollouts of different final rewards, ``prompt`` /
  ``chosen`` / ``rejected`` pairs (the layout of preference-tuning libraries) with both rewards and rollout ids;
* ``rewards`` -- one row per rollout: ids, status, times and final reward (what the dashboard's learning curve reads);
* ``trajectories`` -- token-level RL samples (:func:`rollouthub.adapter.build_trajectories`): ``prompt_ids``,
  ``response_ids``, ``response_mask`` (1 on sampled tokens, 0 on tool/user tokens spliced in), the serving engine's
  ``response_logprobs``, rewards, policy version and group id; ``level="trajectory"`` (default: consecutive calls of
  an attempt merged) or ``"transition"`` (one row per LLM call).

Rows come in rollout start-time order; the store is read page by page, so memory stays bounded whatever its size.

>>> from rollouthub.export import export
>>> summary = export("messages", "sft.jsonl", database="rollouthub.db", min_reward=1.0)  # doctest: +SKIP
>>> print(summary.describe())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Optional

from rollouthub.types import TRAJECTORY_LEVELS, TrajectoryLevel

from .selection import EXPORT_FORMATS, FINISHED_STATUSES, ExportFormat, ExportSelection, Pairing
from .sources import ExportSourceError, open_source
from .stream import DEFAULT_PAGE_SIZE, ExportSummary, ProgressCallback, iter_export_rows
from .writers import encode_jsonl, open_writer

__all__ = [
    "export",
    "export_async",
    "iter_export_rows",
    "ExportSelection",
    "ExportSummary",
    "ExportFormat",
    "ExportSourceError",
    "EXPORT_FORMATS",
    "FINISHED_STATUSES",
    "Pairing",
    "encode_jsonl",
    "open_source",
]


def _file_format(output: Optional[str], file_format: Optional[str]) -> str:
    if file_format is not None:
        return file_format
    return "parquet" if output is not None and output.endswith((".parquet", ".pq")) else "jsonl"


async def export_async(
    format: ExportFormat,
    output: Optional[str] = None,
    *,
    store_url: Optional[str] = None,
    api_token: Optional[str] = None,
    database: Optional[str] = None,
    selection: Optional[ExportSelection] = None,
    file_format: Optional[str] = None,
    pairing: Pairing = "all",
    page_size: int = DEFAULT_PAGE_SIZE,
    on_progress: Optional[ProgressCallback] = None,
    level: TrajectoryLevel = "trajectory",
    **selection_fields: Any,
) -> ExportSummary:
    """Export ``format`` rows to ``output`` (a path; ``None`` or ``"-"`` = stdout, JSONL only) and return the summary.

    Read from ``store_url`` (with ``api_token``) or ``database`` (a SQLite file or SQL URL). Select rollouts with
    ``selection`` or its fields as keywords (``status_in``, ``mode_in``, ``resources_id_in``, ``rollout_id_in``,
    ``since``, ``until``, ``min_reward``, ``max_reward``; see :class:`ExportSelection`). ``file_format`` is
    ``"jsonl"`` or ``"parquet"`` (default: from the output's extension). ``level``: ``trajectories`` rows per merged
    trajectory (default) or per LLM call (``"transition"``). A failed export leaves no partial file.
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r}; use one of {', '.join(EXPORT_FORMATS)}")
    if level not in TRAJECTORY_LEVELS:
        raise ValueError(f"unknown trajectory level {level!r}; use one of {', '.join(TRAJECTORY_LEVELS)}")
    if selection is None:
        selection = ExportSelection(**selection_fields)
    elif selection_fields:
        raise ValueError("give either a selection or its fields as keywords, not both")
    path = None if output in (None, "-") else output
    kind = _file_format(path, file_format)
    summary = ExportSummary(format)
    async with open_source(store_url=store_url, api_token=api_token, database=database) as store:
        # Written to <output>.part and renamed at the end: a failed or interrupted export leaves no partial file.
        tmp = None if path is None else f"{path}.part"
        stream = None if tmp is None or kind == "parquet" else open(tmp, "wb")
        try:
            writer = open_writer(kind, format, tmp, stream if tmp is not None else sys.stdout.buffer)
            try:
                async for row in iter_export_rows(
                    store,
                    format,
                    selection,
                    pairing=pairing,
                    page_size=page_size,
                    summary=summary,
                    on_progress=on_progress,
                    level=level,
                ):
                    writer.write(row)
            finally:
                writer.close()
                if stream is not None:
                    stream.close()
        except BaseException:
            if tmp is not None and os.path.exists(tmp):
                os.remove(tmp)
            raise
        if tmp is not None and path is not None:
            os.replace(tmp, path)
    return summary


def export(format: ExportFormat, output: Optional[str] = None, **kwargs: Any) -> ExportSummary:
    """Synchronous :func:`export_async` (runs its own event loop)."""
    return asyncio.run(export_async(format, output, **kwargs))
