"""Export what agents did as training data: ``rollouthub export`` and :func:`export` (issue 18).

Formats (one row per line in JSONL, or Parquet with the ``[parquet]`` extra):

* ``messages`` -- one row per rollout (per conversation, for agents that hold several): chat ``messages`` with tool
  calls and ``tools`` in the OpenAI fine-tuning layout, the final ``reward``, ids, the rollout ``input``; loadable as a
  chat SFT dataset;
* ``triplets`` -- one row per LLM call in TRL's prompt-completion layout: ``prompt`` (chat messages),
  ``completion`` (a list with the assistant message), ``prompt_token_ids`` / ``completion_token_ids`` when recorded
  (e.g. through the LLM proxy), the call's ``reward``, the rollout's ``final_reward``, ``step`` index and ids -- for
  RL (``triplet_fields="response"``: the answer as text in ``response``, ``response_token_ids``);
* ``preferences`` -- pairs of answers to one prompt (same input, same rendered prompt) with different final rewards:
  ``prompt`` / ``chosen`` / ``rejected`` chat messages (TRL's conversational preference layout) with both rewards
  and rollout ids;
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

from .dedupe import RowDeduper
from .selection import (
    EXPORT_FORMATS,
    FINISHED_STATUSES,
    TRIPLET_FIELDS,
    ExportFormat,
    ExportSelection,
    Pairing,
    TripletFields,
)
from .sources import ExportSourceError, open_source
from .stream import DEFAULT_PAGE_SIZE, ExportSummary, ProgressCallback, iter_export_rows
from .writers import encode_jsonl, file_format_of, open_writer

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
    "TripletFields",
    "TRIPLET_FIELDS",
    "encode_jsonl",
    "file_format_of",
    "open_source",
]


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
    dedupe: bool = False,
    triplet_fields: TripletFields = "completion",
    page_size: int = DEFAULT_PAGE_SIZE,
    on_progress: Optional[ProgressCallback] = None,
    level: TrajectoryLevel = "trajectory",
    **selection_fields: Any,
) -> ExportSummary:
    """Export ``format`` rows to ``output`` (a path; ``None`` or ``"-"`` = stdout, JSONL only) and return the summary.

    Read from ``store_url`` (any URL the server prints, or ``host:port``; with ``api_token``) or ``database`` (a
    SQLite path, ``sqlite:///...`` or ``postgresql://...`` URL; see :mod:`rollouthub.store.locations`). Select
    rollouts with ``selection`` or its fields as keywords (``status_in``, ``mode_in``, ``resources_id_in``,
    ``rollout_id_in``, ``since``, ``until``, ``min_reward``, ``max_reward``; see :class:`ExportSelection`).
    ``file_format`` is ``"jsonl"`` or ``"parquet"`` (default: from the output's extension, ``.jsonl``/``.ndjson`` or
    ``.parquet``/``.pq``; any other extension is a ``ValueError``). ``pairing``: preference pairs per prompt;
    ``dedupe``: drop rows repeating an earlier row's content; ``triplet_fields``: ``"completion"`` (TRL's names) or
    ``"response"``; ``level``: ``trajectories`` rows per merged trajectory (default) or per LLM call
    (``"transition"``). A failed export leaves no partial file.
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r}; use one of {', '.join(EXPORT_FORMATS)}")
    if triplet_fields not in TRIPLET_FIELDS:
        raise ValueError(f"unknown triplet fields {triplet_fields!r}; use one of {', '.join(TRIPLET_FIELDS)}")
    if level not in TRAJECTORY_LEVELS:
        raise ValueError(f"unknown trajectory level {level!r}; use one of {', '.join(TRAJECTORY_LEVELS)}")
    if selection is None:
        selection = ExportSelection(**selection_fields)
    elif selection_fields:
        raise ValueError("give either a selection or its fields as keywords, not both")
    if dedupe:
        RowDeduper(format)  # a format without row identity fails before anything is read
    path = None if output in (None, "-") else output
    kind = file_format_of(path, file_format)
    summary = ExportSummary(format)
    async with open_source(store_url=store_url, api_token=api_token, database=database) as store:
        # Written to <output>.part and renamed at the end: a failed or interrupted export leaves no partial file.
        tmp = None if path is None else f"{path}.part"
        stream = None if tmp is None or kind == "parquet" else open(tmp, "wb")
        try:
            writer = open_writer(
                kind, format, tmp, stream if tmp is not None else sys.stdout.buffer, triplet_fields=triplet_fields
            )
            try:
                async for row in iter_export_rows(
                    store,
                    format,
                    selection,
                    pairing=pairing,
                    dedupe=dedupe,
                    triplet_fields=triplet_fields,
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
