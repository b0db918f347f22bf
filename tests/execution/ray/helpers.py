"""Checks and waits the Ray strategy tests share: which runner is busy, every rollout ended, what a store holds."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Tuple

import rollouthub as agl
from rollouthub.types import RolloutConfig

PROMPT = {"prompt_template": agl.PromptTemplate(template="Q: {q}", engine="f-string")}
"""The resources of the tests' agents: a prompt template filled with the task's ``q``."""

ACTIVE = ("preparing", "running")
"""Attempt states of a runner at work (an attempt is ``preparing`` until its first span)."""


async def enqueue_prompt_tasks(store: Any, n: int, config: Optional[RolloutConfig] = None) -> List[str]:
    """Publish :data:`PROMPT` and enqueue ``n`` tasks ``{"q": "0"}``, ``{"q": "1"}``, ... (with ``config`` when
    given); returns their rollout ids in order."""
    await store.add_resources(PROMPT)
    kwargs = {} if config is None else {"config": config}
    return [(await store.enqueue_rollout(input={"q": str(i)}, **kwargs)).rollout_id for i in range(n)]


async def all_attempts(store: Any, rollout_ids: Sequence[str]) -> List[Any]:
    """Every attempt of ``rollout_ids``, in that order."""
    return [attempt for rollout_id in rollout_ids for attempt in await store.query_attempts(rollout_id)]


async def busy_runner(store: Any, rollout_ids: Sequence[str], timeout: float = 60.0) -> int:
    """The index of a runner executing one of ``rollout_ids`` (waits until one does, at most ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while not (running := [a for a in await all_attempts(store, rollout_ids) if a.status in ACTIVE and a.worker_id]):
        assert time.monotonic() < deadline, "no runner started a rollout"
        await asyncio.sleep(0.05)
    return int(running[0].worker_id.split("-")[-1])


async def wait_all_ended(store: Any, rollout_ids: Sequence[str], timeout: float) -> None:
    """Wait until every rollout of ``rollout_ids`` has ended (at most ``timeout`` s), asking the store in short calls
    (a call in flight while a store server restarts waits for it: a short one keeps the deadline honest)."""
    deadline = time.monotonic() + timeout
    while len(ended := await store.wait_for_rollouts(rollout_ids=list(rollout_ids), timeout=0.05)) < len(rollout_ids):
        assert time.monotonic() < deadline, f"only {len(ended)} of {len(rollout_ids)} rollouts ended"
        await asyncio.sleep(0.2)


def assert_each_succeeded_once(rollouts: Sequence[Any], attempts: Sequence[Any], config: RolloutConfig) -> int:
    """Every rollout succeeded, within ``config.max_attempts`` attempts of which exactly one succeeded (none lost,
    none counted twice); returns how many rollouts needed more than one attempt."""
    by_rollout: Dict[str, List[Any]] = {}
    for attempt in attempts:
        by_rollout.setdefault(attempt.rollout_id, []).append(attempt)
    for rollout in rollouts:
        tries = by_rollout[rollout.rollout_id]
        assert rollout.status == "succeeded", (rollout, tries)
        assert 1 <= len(tries) <= config.max_attempts
        assert [a.status for a in tries].count("succeeded") == 1
    return sum(1 for tries in by_rollout.values() if len(tries) > 1)


async def rollouts_and_workers(store: Any) -> Tuple[Any, Any]:
    """The rollouts and workers ``store`` (a store or a client over one) holds; closes it."""
    try:
        return await store.query_rollouts(), await store.query_workers()
    finally:
        await store.close()


def answers(url: str) -> bool:
    """Whether a store server answers ``GET /v1/agl/health`` at ``url``."""
    try:
        with urllib.request.urlopen(url + "/v1/agl/health", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False
