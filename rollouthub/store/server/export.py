"""Training-data routes of the store server (issue 18), declared like every other route (never on the hot path):

* ``GET /v1/agl/export?format=...`` streams :mod:`rollouthub.export` rows as JSONL (``application/x-ndjson``, an
  attachment named ``rollouthub-<format>.jsonl``), reading the store page by page: the server's memory stays bounded
  whatever the store holds. Query parameters: ``format`` (``messages``, ``triplets``, ``preferences``, ``rewards``,
  ``trajectories``), ``status_in``, ``mode_in``, ``resources_id_in``, ``rollout_id_in`` (repeated), ``since``,
  ``until``, ``min_reward``, ``max_reward`` (numbers), ``pairs`` (``all``/``best-worst``), ``dedupe``
  (``true``/``false``), ``triplet_fields`` (``completion``/``response``), ``level`` (``trajectory``/``transition``,
  ``format=trajectories`` only) -- validated before anything is read: a bad or unknown parameter is a 400 naming it. Every export shares the server's cache of final rewards
  (:class:`rollouthub.export.reward_cache.FinalRewardCache` in ``app.state.reward_cache``, at most
  ``ROLLOUTHUB_REWARD_CACHE_ENTRIES`` entries, default 100 000; ``0`` disables it): the dashboard's learning curve
  re-reads every finished rollout's final reward every few seconds, and the spans are read again only for the
  rollouts that changed since. ``rewards`` rows are read 1000 rollouts per store query (they hold no spans), the
  other formats 100.
* ``GET /v1/agl/rollouts/{rollout_id}/conversation``: the rollout's LLM calls (prompt, response, tool calls, token
  counts), its conversations (the ``messages`` export rows) and its final reward -- the dashboard's conversation view.

Layering: the server sits above the export package -- ``rollouthub.export`` reads stores through the store contract
and never imports the server (``tests/test_layering.py``). The export code these routes call (``rollouthub.export`` →
``rollouthub.adapter`` / ``rollouthub.emitter`` → ``rollouthub.types``) imports no runner, trainer, algorithm or LLM
proxy module; it is imported on first use, so a server that never exports does not load it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Dict, List, Optional

import pydantic
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, StreamingResponse

from .endpoint import Call
from .routing import REQUIRED, Query, Route

__all__ = ["export_routes", "parse_export_query", "ExportQuery"]

_OPTION_PARAMS = ("pairs", "dedupe", "triplet_fields", "level")
_LIST_PARAMS = ("status_in", "mode_in", "resources_id_in", "rollout_id_in")
_NUMBER_PARAMS = ("since", "until", "min_reward", "max_reward")
_PAGE_SIZE = 100
_REWARDS_PAGE_SIZE = 1000
"""A page of the store is sorted by start time for each query: few large pages instead of many small ones (the
rows of a ``rewards`` export are small; the page's rollouts are all it holds)."""

REWARD_CACHE_ENV = "ROLLOUTHUB_REWARD_CACHE_ENTRIES"
"""Cap of the server's final-reward cache (entries; ``0`` disables it)."""


def _bad(field: str, message: str) -> HTTPException:
    return HTTPException(400, f"Invalid query parameter {field}: {message}")


@dataclass(frozen=True)
class ExportQuery:
    """A validated export request: format, rollout selection and row options."""

    format: str
    selection: Any
    pairs: str = "all"
    dedupe: bool = False
    triplet_fields: str = "completion"
    level: str = "trajectory"


def parse_export_query(params: QueryParams) -> ExportQuery:
    """The :class:`ExportQuery` of the query parameters; ``HTTPException(400)`` naming the bad one."""
    from rollouthub.export.dedupe import DEDUPE_FIELDS
    from rollouthub.export.selection import EXPORT_FORMATS, TRIPLET_FIELDS, ExportSelection
    from rollouthub.types import TRAJECTORY_LEVELS

    known = {"format", *_OPTION_PARAMS, *_LIST_PARAMS, *_NUMBER_PARAMS}
    for key in params.keys():
        if key not in known:
            raise _bad(key, f"unknown parameter (allowed: {', '.join(sorted(known))})")
    for key in ("format", *_OPTION_PARAMS, *_NUMBER_PARAMS):
        if len(params.getlist(key)) > 1:
            raise _bad(key, "given more than once")
    format = params.get("format")
    if format not in EXPORT_FORMATS:
        raise _bad("format", f"must be one of {', '.join(EXPORT_FORMATS)}")
    pairs = params.get("pairs", "all")
    if pairs not in ("all", "best-worst"):
        raise _bad("pairs", "must be 'all' or 'best-worst'")
    dedupe = params.get("dedupe", "false").lower()
    if dedupe not in ("true", "false", "1", "0"):
        raise _bad("dedupe", "must be true or false")
    if dedupe in ("true", "1") and format not in DEDUPE_FIELDS:
        raise _bad("dedupe", f"applies to {', '.join(DEDUPE_FIELDS)} rows, not to {format} rows")
    triplet_fields = params.get("triplet_fields", "completion")
    if triplet_fields not in TRIPLET_FIELDS:
        raise _bad("triplet_fields", f"must be one of {', '.join(TRIPLET_FIELDS)}")
    level = params.get("level", "trajectory")
    if "level" in params and format != "trajectories":
        raise _bad("level", "applies to format=trajectories only")
    if level not in TRAJECTORY_LEVELS:
        raise _bad("level", f"must be one of {', '.join(TRAJECTORY_LEVELS)}")
    fields: Dict[str, Any] = {key: params.getlist(key) for key in _LIST_PARAMS if key in params}
    for key in _NUMBER_PARAMS:
        if key in params:
            try:
                fields[key] = float(params[key])
            except ValueError:
                raise _bad(key, f"{params[key]!r} is not a number") from None
    try:
        selection = ExportSelection(**fields)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        field = (
            str(error["loc"][0]) if error["loc"] else "/".join(k for k in fields if k in str(error["msg"])) or "query"
        )
        raise _bad(field, str(error["msg"]).removeprefix("Value error, ")) from None
    return ExportQuery(format, selection, pairs, dedupe in ("true", "1"), triplet_fields, level)


def _reward_cache_entries() -> Optional[int]:
    """``$ROLLOUTHUB_REWARD_CACHE_ENTRIES`` (``None`` when unset); ``ValueError`` naming it when invalid."""
    from rollouthub.env_var import resolve_int_env_var

    entries = resolve_int_env_var(REWARD_CACHE_ENV)
    if entries is not None and entries < 0:
        raise ValueError(f"{REWARD_CACHE_ENV} must be 0 (no cache) or a positive number of entries, got {entries}")
    return entries


def _rewards(call: Call, entries: Optional[int]) -> Any:
    """The server's final-reward cache (``app.state.reward_cache``), created by the first export."""
    state = call.app.state
    cache = getattr(state, "reward_cache", None)
    if cache is None:
        from rollouthub.export.reward_cache import FinalRewardCache

        cache = state.reward_cache = FinalRewardCache() if entries is None else FinalRewardCache(entries)
    return cache


async def _export_rows(call: Call, cache_entries: Optional[int]) -> Any:
    # The declared parameters document the route; the whole query string is checked here (unknown or repeated
    # parameters are 400s naming them).
    query = parse_export_query(QueryParams(call.scope["query_string"]))
    kind = query.format
    from rollouthub.export.stream import iter_export_rows
    from rollouthub.export.writers import encode_jsonl

    server = call.server
    page_size = _REWARDS_PAGE_SIZE if kind == "rewards" else _PAGE_SIZE
    rewards = _rewards(call, cache_entries)

    async def body() -> AsyncIterator[bytes]:
        chunk: List[bytes] = []
        size = 0
        async for row in iter_export_rows(
            server,
            kind,  # type: ignore[arg-type]
            query.selection,
            pairing=query.pairs,  # type: ignore[arg-type]
            dedupe=query.dedupe,
            triplet_fields=query.triplet_fields,  # type: ignore[arg-type]
            page_size=page_size,
            rewards=rewards,
            level=query.level,  # type: ignore[arg-type]
        ):
            line = encode_jsonl(row)
            chunk.append(line)
            size += len(line)
            if size >= 64 * 1024:
                yield b"".join(chunk)
                chunk, size = [], 0
        if chunk:
            yield b"".join(chunk)

    return StreamingResponse(
        body(),
        media_type="application/x-ndjson",
        headers={"content-disposition": f'attachment; filename="rollouthub-{kind}.jsonl"'},
    )


async def conversation(call: Call) -> Any:
    """The LLM calls, conversations and final reward of one rollout (its latest attempt)."""
    from rollouthub.export.rows import conversation_view

    (rollout_id,) = call.params
    server = call.server
    rollout = await server.get_rollout_by_id(rollout_id)
    if rollout is None:
        return JSONResponse({"detail": f"Rollout {rollout_id} not found"}, status_code=404)
    attempt = getattr(rollout, "attempt", None)
    spans = list(await server.query_spans(rollout_id, attempt.attempt_id)) if attempt is not None else []
    view = conversation_view(rollout, attempt.attempt_id if attempt is not None else None, spans)
    return JSONResponse(view)


_EXPORT_QUERY = {
    "format": Query(str, REQUIRED, description="messages, triplets, preferences, rewards or trajectories"),
    "status_in": Query(Optional[List[str]], description="rollout statuses (default: succeeded, failed)"),
    "mode_in": Query(Optional[List[str]]),
    "resources_id_in": Query(Optional[List[str]]),
    "rollout_id_in": Query(Optional[List[str]]),
    "since": Query(Optional[str], description="rollouts started at or after (epoch seconds)"),
    "until": Query(Optional[str], description="rollouts started at or before (epoch seconds)"),
    "min_reward": Query(Optional[str]),
    "max_reward": Query(Optional[str]),
    "pairs": Query(Optional[str], description="preferences: all (default) or best-worst"),
    "dedupe": Query(Optional[str], description="true: drop rows repeating an earlier row's content"),
    "triplet_fields": Query(Optional[str], description="triplets: completion (default, TRL's names) or response"),
    "level": Query(Optional[str], description="trajectories: trajectory (default) or transition"),
}


def export_routes(prefix: str) -> List[Route]:
    """The export and conversation routes under ``prefix`` (``/v1/agl``); ``ValueError`` for an invalid
    ``$ROLLOUTHUB_REWARD_CACHE_ENTRIES`` (checked here: a bad value stops the server at start)."""
    cache_entries = _reward_cache_entries()

    async def export_rows(call: Call) -> Any:
        """Stream training-data rows as JSONL (see :mod:`rollouthub.export`)."""
        return await _export_rows(call, cache_entries)

    return [
        Route(
            ["GET"],
            f"{prefix}/export",
            export_rows,
            query=_EXPORT_QUERY,
            name="export",
            doc={"response_media_type": None},  # a JSONL stream: no schema documented
        ),
        Route(["GET"], f"{prefix}/rollouts/{{rollout_id}}/conversation", conversation),
    ]
