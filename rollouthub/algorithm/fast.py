"""Quick developer algorithms: :class:`FastAlgorithm` and the smoke-test :class:`Baseline`."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, List, Literal, Optional, Sequence

from rollouthub.store.base import LightningStore
from rollouthub.types import Attempt, Rollout, RolloutMode

from .base import Algorithm, Dataset
from .utils import rollout_wait_step, with_llm_proxy, with_store

if TYPE_CHECKING:  # pragma: no cover
    from rollouthub.llm_proxy import LLMProxy

__all__ = ["FastAlgorithm", "Baseline"]

logger = logging.getLogger(__name__)

_TERMINAL = ("succeeded", "failed", "cancelled")


class FastAlgorithm(Algorithm):
    """Marker base for quick developer algorithms; :meth:`Trainer.dev` requires one."""


def _iso(ts: Optional[float]) -> str:
    return datetime.fromtimestamp(ts).isoformat() if ts is not None else "?"


def _timing(rollout: Rollout, attempts: Sequence[Attempt]) -> str:
    """`` in 0.12 seconds (0.15 s after it was enqueued)``: how long the last attempt ran, from the store's times."""
    last = max(attempts, key=lambda a: a.sequence_id, default=None)
    if last is None or last.end_time is None:
        return ""
    text = f" in {last.end_time - last.start_time:.2f} seconds"
    if rollout.end_time is not None:
        text += f" ({rollout.end_time - rollout.start_time:.2f} s after it was enqueued)"
    return text


class Baseline(FastAlgorithm):
    """Smoke-test algorithm: enqueue every sample, wait for each rollout and log what came back.

    It waits on the store's wake-ups (``wait_for_rollouts`` returns as soon as a rollout finishes), so a rollout is
    harvested the moment it finishes and the next sample is enqueued as soon as the queue has room; the polling
    interval is only the longest pause between two looks when nothing wakes it.

    Args:
        n_epochs: passes over the concatenated train + validation samples.
        train_split: must be strictly between 0 and 1 (kept for compatibility; otherwise unused).
        polling_interval: longest wait between two status checks of a rollout or of the queue length.
        max_queue_length: enqueue only while at most this many rollouts are queuing/requeuing.
        span_verbosity: ``"keys"`` (attribute keys), ``"key_values"`` (full attributes) or ``"none"``.
    """

    def __init__(
        self,
        *,
        n_epochs: int = 1,
        train_split: float = 0.5,
        polling_interval: float = 5.0,
        max_queue_length: int = 4,
        span_verbosity: Literal["keys", "key_values", "none"] = "keys",
    ) -> None:
        if not 0.0 < train_split < 1.0:
            raise ValueError("train_split must be between 0 and 1.")
        if span_verbosity not in ("keys", "key_values", "none"):
            raise ValueError("span_verbosity must be one of 'keys', 'key_values' or 'none'.")
        if not polling_interval > 0:
            raise ValueError(f"polling_interval must be a positive number of seconds, got {polling_interval!r}.")
        self.n_epochs = n_epochs
        self.train_split = train_split
        self.polling_interval = polling_interval
        self.max_queue_length = max_queue_length
        self.span_verbosity = span_verbosity

    @with_llm_proxy()
    @with_store
    async def run(  # type: ignore[override]
        self,
        store: LightningStore,
        llm_proxy: Optional[LLMProxy],
        train_dataset: Optional[Dataset[Any]] = None,
        val_dataset: Optional[Dataset[Any]] = None,
    ) -> None:
        """Enqueue train then validation samples for ``n_epochs`` epochs and log every finished rollout."""
        train_len = len(train_dataset) if train_dataset is not None else 0
        val_len = len(val_dataset) if val_dataset is not None else 0
        if train_len == 0 and val_len == 0:
            logger.error("Baseline received neither a train nor a validation dataset; nothing to do.")
            return
        samples: List[Any] = [train_dataset[i] for i in range(train_len)] if train_dataset is not None else []
        if val_dataset is not None:
            samples.extend(val_dataset[i] for i in range(val_len))

        initial = self.get_initial_resources()
        resources_id: Optional[str]
        if initial is not None:
            await store.update_resources("default", initial)
            resources_id = "default"
        else:
            logger.warning("No initial resources provided; rollouts will use the latest resources in the store.")
            resources_id = None

        for epoch in range(self.n_epochs):
            harvest: List[asyncio.Task[None]] = []
            for index, sample in enumerate(samples):
                await self._wait_for_queue_room(store, harvest)
                mode: RolloutMode = "train" if index < train_len else "val"
                rollout = await store.enqueue_rollout(input=sample, mode=mode, resources_id=resources_id)
                logger.info(
                    "[Epoch %d | Sample %d] Enqueued rollout %s (mode %s).", epoch, index, rollout.rollout_id, mode
                )
                harvest.append(asyncio.create_task(self._harvest(store, rollout.rollout_id)))
            await asyncio.gather(*harvest)
            logger.info("Epoch %d finished: %d rollouts harvested.", epoch, len(harvest))

    async def _wait_for_queue_room(self, store: LightningStore, harvest: List[asyncio.Task[None]]) -> None:
        """Return once at most ``max_queue_length`` rollouts are queuing.

        The queue is looked at again whenever one of this run's rollouts finishes (its runner then claims the next
        one), and at the latest every ``polling_interval``.
        """
        while True:
            queued = await store.query_rollouts(status_in=["queuing", "requeuing"], limit=0)
            if queued.total <= self.max_queue_length:
                return
            unfinished = [task for task in harvest if not task.done()]
            if unfinished:
                await asyncio.wait(unfinished, timeout=self.polling_interval, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(self.polling_interval)

    async def _wait_until_finished(self, store: LightningStore, rollout_id: str) -> Optional[Rollout]:
        """Wait on the store's wake-ups until the rollout finishes; log its status changes, looked at every
        ``polling_interval``. Returns ``None`` when the rollout disappeared from the store."""
        step = rollout_wait_step(store, self.polling_interval)
        last_status: Optional[str] = None
        next_look = 0.0
        while True:
            if time.monotonic() >= next_look:
                current = await store.get_rollout_by_id(rollout_id)
                if current is None:
                    logger.error("[Rollout %s] Not found in the store; not harvested.", rollout_id)
                    return None
                if current.status != last_status:
                    logger.info("[Rollout %s] Status changed to %s.", rollout_id, current.status)
                    last_status = current.status
                if current.status in _TERMINAL:
                    return current
                next_look = time.monotonic() + self.polling_interval
            waited_from = time.monotonic()
            finished = await store.wait_for_rollouts(rollout_ids=[rollout_id], timeout=step)
            if finished:
                if finished[0].status != last_status:
                    logger.info("[Rollout %s] Status changed to %s.", rollout_id, finished[0].status)
                return finished[0]
            early = step - (time.monotonic() - waited_from)
            if early > 0:  # a store that answered at once (e.g. the rollout is gone): keep the pace, do not spin
                await asyncio.sleep(early)

    async def _harvest(self, store: LightningStore, rollout_id: str) -> None:
        """Wait for one rollout to finish, then log its attempts, spans and adapted data."""
        rollout = await self._wait_until_finished(store, rollout_id)
        if rollout is None:
            return
        attempts = list(await store.query_attempts(rollout_id))
        logger.info("[Rollout %s] Finished with status %s%s.", rollout_id, rollout.status, _timing(rollout, attempts))
        for attempt in attempts:
            logger.info(
                "[Rollout %s | Attempt %s] #%d status=%s worker=%s",
                rollout_id,
                attempt.attempt_id,
                attempt.sequence_id,
                attempt.status,
                attempt.worker_id,
            )
            if self.span_verbosity == "none":
                continue
            spans = await store.query_spans(rollout_id, attempt_id=attempt.attempt_id)
            for span in spans:
                elapsed = (
                    span.end_time - span.start_time
                    if span.end_time is not None and span.start_time is not None
                    else 0.0
                )
                if self.span_verbosity == "keys":
                    detail = f"Attribute keys: {list(span.attributes.keys())}"
                else:
                    detail = f"Attributes: {json.dumps(span.attributes, default=str)}"
                logger.info(
                    "[Rollout %s | Attempt %s | Span %s] #%d (%s) From %s to %s, %.3f seconds. %s",
                    rollout_id,
                    attempt.attempt_id,
                    span.span_id,
                    span.sequence_id,
                    span.name,
                    _iso(span.start_time),
                    _iso(span.end_time),
                    elapsed,
                    detail,
                )
        try:
            adapter = self.get_adapter()
        except ValueError:
            return
        spans = await store.query_spans(rollout_id, attempt_id="latest")
        if not spans:  # e.g. interrupted before the agent produced any: nothing to adapt, nothing wrong with it
            logger.info("[Rollout %s] No spans to adapt.", rollout_id)
            return
        try:
            adapted = adapter.adapt(spans)
        except Exception:
            logger.exception("[Rollout %s] The adapter failed on the rollout's spans.", rollout_id)
            return
        logger.info("[Rollout %s] Adapted data: %s", rollout_id, adapted)
