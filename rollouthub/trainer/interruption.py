"""What an interrupted training run leaves behind: its unfinished rollouts are cancelled.

A run stopped by Ctrl+C or SIGTERM leaves the rollouts its algorithm enqueued and no runner finished: ``queuing``,
``preparing``, ``running`` or ``requeuing``. Left so, the next run on the same store would execute them with the old
run's resources and count them as its own. The Trainer therefore notes the store's unfinished rollouts before the run
(:func:`unfinished_rollout_ids`) and, after an interruption, marks every unfinished rollout that was not among them
``cancelled`` (a terminal status set by a user; the store stamps its ``end_time``) through the store's public API
(:func:`cancel_new_unfinished`). Rollouts enqueued meanwhile by another process on a shared store would be cancelled
too: one training run per store at a time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Collection, List, Optional, Set, Tuple

from rollouthub.store.base import LightningStore
from rollouthub.types import RolloutStatus

__all__ = [
    "UNFINISHED_STATUSES",
    "cancel_interrupted_run",
    "cancel_new_unfinished",
    "note_unfinished",
    "unfinished_rollout_ids",
]

logger = logging.getLogger(__name__)

UNFINISHED_STATUSES: Tuple[RolloutStatus, ...] = ("queuing", "preparing", "running", "requeuing")
"""Rollout statuses that a runner may still pick up or finish."""

_PAGE = 500


async def unfinished_rollout_ids(store: LightningStore) -> Set[str]:
    """The ids of the store's rollouts that are not finished (read page by page)."""
    ids: Set[str] = set()
    offset = 0
    while True:
        page = await store.query_rollouts(
            status_in=list(UNFINISHED_STATUSES),
            sort_by="rollout_id",
            limit=_PAGE,
            offset=offset,
        )
        ids.update(rollout.rollout_id for rollout in page.items)
        offset += len(page.items)
        if len(page.items) < _PAGE or offset >= page.total:
            return ids


async def cancel_new_unfinished(store: LightningStore, before: Collection[str]) -> List[str]:
    """Mark ``cancelled`` every unfinished rollout not in ``before``; returns their ids.

    A rollout that finishes in the meantime (the store refuses the update) is left as it is.
    """
    cancelled: List[str] = []
    for rollout_id in sorted(await unfinished_rollout_ids(store) - set(before)):
        try:
            await store.update_rollout(rollout_id, status="cancelled")
        except Exception as exc:  # noqa: BLE001 - one rollout must not stop the others
            logger.warning("Could not cancel the rollout %s: %s", rollout_id, exc)
        else:
            cancelled.append(rollout_id)
    return cancelled


def note_unfinished(store: LightningStore) -> Optional[Set[str]]:
    """Before a run (no event loop running): the store's unfinished rollout ids, ``None`` if the store cannot say."""
    try:
        return asyncio.run(unfinished_rollout_ids(store))
    except Exception as exc:  # noqa: BLE001 - the run goes on; only its clean-up after an interruption is lost
        logger.warning(
            "Could not list the store's unfinished rollouts (%s): an interrupted run cannot cancel its own.", exc
        )
        return None


def cancel_interrupted_run(store: LightningStore, before: Optional[Set[str]], interruption: BaseException) -> List[str]:
    """After an interruption (no event loop running): cancel the run's unfinished rollouts and log one line."""
    if before is None:
        return []
    try:
        cancelled = asyncio.run(cancel_new_unfinished(store, before))
    except Exception as exc:  # noqa: BLE001 - the interruption is what the caller reports
        logger.warning("Interrupted: could not cancel the run's unfinished rollouts: %s", exc)
        return []
    what = "SIGTERM" if type(interruption).__name__ == "Terminated" else "Ctrl+C"
    logger.warning(
        "Interrupted (%s): cancelled %d unfinished rollout(s) of this run so that no later run executes them.",
        what,
        len(cancelled),
    )
    return cancelled
