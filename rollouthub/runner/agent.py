"""``LitAgentRunner``: pulls rollouts from a store, runs a ``LitAgent`` under a tracer, reports results."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, List, Literal, Optional, Sequence, Tuple, TypeVar, cast

from rollouthub.env_var import RUNNER_NODE_ENV
from rollouthub.store.base import sleep_unless_abandoned
from rollouthub.tracer.base import Tracer
from rollouthub.types import AttemptedRollout, NamedResources, Rollout, RolloutMode, Span, SpanCoreFields, TaskInput

from .base import Runner

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

__all__ = ["LitAgentRunner"]

logger = logging.getLogger(__name__)

T_task = TypeVar("T_task")

HeartbeatLaunchMode = Literal["thread", "asyncio"]

_MIN_WAIT_SECONDS = 0.01
_STALE_GRACE_SECONDS = 1.0

STOPPED_HEARTBEAT_TIMEOUT_SECONDS = 2.0
"""Longest wait for the last heartbeat of a stopping runner (the one that says ``runner_state: stopped``)."""


def _is_readable_span(value: Any) -> bool:
    try:
        from opentelemetry.sdk.trace import ReadableSpan
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, ReadableSpan)


class LitAgentRunner(Runner[T_task]):
    """Run a ``LitAgent`` on rollouts taken from a store.

    Args:
        tracer: tracer used for every rollout (the runner does not create one).
        max_rollouts: cap on rollouts processed by one :meth:`iter` call (``None`` = unlimited).
        poll_interval: seconds between dequeue attempts while the queue is empty.
        heartbeat_interval: seconds between worker heartbeats; ``<= 0`` disables heartbeats. Every heartbeat's
            stats carry ``heartbeat_interval``; when :meth:`iter` ends, a last one adds ``runner_state: "stopped"``.
        interval_jitter: uniform jitter ± this value on poll and heartbeat waits (minimum wait 0.01 s).
        heartbeat_launch_mode: ``"thread"`` (producer + consumer threads) or ``"asyncio"`` (a task on the loop).
        heartbeat_include_gpu: include GPU stats in heartbeat snapshots.
    """

    def __init__(
        self,
        tracer: Tracer,
        max_rollouts: Optional[int] = None,
        poll_interval: float = 5.0,
        heartbeat_interval: float = 10.0,
        interval_jitter: float = 0.5,
        heartbeat_launch_mode: HeartbeatLaunchMode = "thread",
        heartbeat_include_gpu: bool = False,
    ) -> None:
        """Configure the runner (see the class docstring)."""
        super().__init__()
        if heartbeat_launch_mode not in ("thread", "asyncio"):
            raise ValueError(f"heartbeat_launch_mode must be 'thread' or 'asyncio', got {heartbeat_launch_mode!r}")
        self._tracer = tracer
        self._max_rollouts = max_rollouts
        self._poll_interval = poll_interval
        self._heartbeat_interval = heartbeat_interval
        self._interval_jitter = interval_jitter
        self._heartbeat_launch_mode: HeartbeatLaunchMode = heartbeat_launch_mode
        self._heartbeat_include_gpu = heartbeat_include_gpu
        self._agent: Optional[Any] = None
        self._hooks: List[Any] = []
        self._store: Optional[LightningStore] = None
        self.worker_id: Optional[int] = None

    # ------------------------------------------------------------------ lifecycle

    def init(self, agent: Any, *, hooks: Optional[Sequence[Any]] = None, **kwargs: Any) -> None:
        """Remember ``agent`` (and wire it to this runner), the hooks, and initialise the tracer."""
        self._agent = agent
        if hasattr(agent, "set_runner"):
            agent.set_runner(self)
        self._hooks = list(hooks or [])
        self._tracer.init()

    def init_worker(self, worker_id: int, store: LightningStore, **kwargs: Any) -> None:  # type: ignore[override]
        """Remember the store and worker id and initialise the tracer's worker."""
        self._store = store
        self.worker_id = worker_id
        self._tracer.init_worker(worker_id, store)

    def teardown_worker(self, worker_id: int, *args: Any, **kwargs: Any) -> None:
        """Forget the worker id and tear down the tracer's worker."""
        self.worker_id = None
        self._tracer.teardown_worker(worker_id)

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Drop the agent, store, worker id and hooks; tear down the tracer."""
        self._agent = None
        self._store = None
        self.worker_id = None
        self._hooks = []
        self._tracer.teardown()

    # ------------------------------------------------------------------ accessors

    @property
    def tracer(self) -> Tracer:
        """The tracer used for every rollout."""
        return self._tracer

    def get_agent(self) -> Any:
        """The agent (``ValueError`` before :meth:`init`)."""
        if self._agent is None:
            raise ValueError("The runner has no agent; call init() first.")
        return self._agent

    def get_store(self) -> LightningStore:
        """The store (``ValueError`` before :meth:`init_worker`)."""
        if self._store is None:
            raise ValueError("The runner has no store; call init_worker() first.")
        return self._store

    def get_worker_id(self) -> str:
        """The worker id used with the store: ``"Worker-<n>"`` or ``"Worker-Unknown"``."""
        return f"Worker-{self.worker_id}" if self.worker_id is not None else "Worker-Unknown"

    def _log_prefix(self, rollout_id: Optional[str] = None) -> str:
        if self.worker_id is not None and rollout_id:
            return f"[Worker {self.worker_id} | Rollout {rollout_id}]"
        if self.worker_id is not None:
            return f"[Worker {self.worker_id}]"
        if rollout_id:
            return f"[Rollout {rollout_id}]"
        return "[Default Worker]"

    def _jittered(self, interval: float) -> float:
        jitter = random.uniform(-self._interval_jitter, self._interval_jitter) if self._interval_jitter > 0 else 0.0
        return max(_MIN_WAIT_SECONDS, interval + jitter)

    # ------------------------------------------------------------------ hooks

    async def _trigger_hooks(self, hook_name: str, **kwargs: Any) -> None:
        """Await ``hook_name`` on every hook in registration order; hook errors are logged and ignored."""
        for hook in self._hooks:
            method = getattr(hook, hook_name, None)
            if method is None:
                continue
            try:
                result = method(**kwargs)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                logger.exception("%s Hook %r failed in %s", self._log_prefix(), hook, hook_name)

    # ------------------------------------------------------------------ result post-processing

    async def _post_process_rollout_result(self, rollout: AttemptedRollout, raw_result: Any) -> List[Any]:
        """Write what the agent returned to the store and return the spans for ``on_rollout_end``."""
        return (await self._write_rollout_result(rollout, raw_result))[0]

    async def _write_rollout_result(self, rollout: AttemptedRollout, raw_result: Any) -> Tuple[List[Any], List[Any]]:
        """Write what the agent returned to the store.

        Returns ``(spans for on_rollout_end, spans of the rollout)``: they differ only when the agent returned a float,
        whose reward span is not given to the hooks (reference quirk, kept) but is part of the rollout -- the runner's
        "Collected N span(s). Final reward: R" line counts it and reads the reward from it.
        """
        store = self.get_store()
        rollout_id = rollout.rollout_id
        attempt_id = rollout.attempt.attempt_id

        if raw_result is None:
            trace = list(self._tracer.get_last_trace())
            return trace, trace

        if isinstance(raw_result, (bool, int)) and not isinstance(raw_result, float):
            logger.warning(
                "%s Reward is not a number, got %s (%r). Auto converting to float.",
                self._log_prefix(rollout_id),
                type(raw_result).__name__,
                raw_result,
            )
            raw_result = float(raw_result)
        if isinstance(raw_result, float):
            from rollouthub.emitter import emit_reward

            trace_spans = list(self._tracer.get_last_trace())
            core = emit_reward(raw_result, propagate=False)
            sequence_id = await store.get_next_span_sequence_id(rollout_id, attempt_id)
            reward_span = Span.from_core_fields(
                core, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id
            )
            await store.add_span(reward_span)
            return trace_spans, [*trace_spans, reward_span]

        if isinstance(raw_result, list):
            items = cast(List[Any], raw_result)
            if not items:
                logger.warning("%s The agent returns an empty list; nothing is written.", self._log_prefix(rollout_id))
                return [], []
            if all(_is_readable_span(item) for item in items):
                from rollouthub.tracer.otel import OtelTracer

                if isinstance(self._tracer, OtelTracer):
                    logger.warning(
                        "%s The agent returned OpenTelemetry spans while the runner uses %s; spans may be duplicated.",
                        self._log_prefix(rollout_id),
                        type(self._tracer).__name__,
                    )
                added: List[Any] = []
                for item in items:
                    stored = await store.add_otel_span(rollout_id, attempt_id, item)
                    if stored is None:
                        logger.error("%s The store rejected span %r.", self._log_prefix(rollout_id), item.name)
                    else:
                        added.append(stored)
                return added, added
            if all(isinstance(item, Span) for item in items):
                for item in items:
                    await store.add_span(item)
                return list(items), list(items)
            if all(isinstance(item, SpanCoreFields) for item in items):
                sequence_ids = await store.get_many_span_sequence_ids([(rollout_id, attempt_id)] * len(items))
                spans = [
                    Span.from_core_fields(core, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=seq)
                    for core, seq in zip(items, sequence_ids, strict=True)
                ]
                await store.add_many_spans(spans)
                return spans, spans
            raise ValueError(f"Invalid raw result type: a list of {sorted({type(i).__name__ for i in items})}")

        raise TypeError(f"Invalid raw result type: {type(raw_result).__name__}")

    # ------------------------------------------------------------------ one rollout

    async def _resolve_resources(self, rollout: AttemptedRollout) -> Optional[NamedResources]:
        store = self.get_store()
        if rollout.resources_id:
            update = await store.get_resources_by_id(rollout.resources_id)
        else:
            update = await store.get_latest_resources()
        return None if update is None else update.resources

    async def _step_impl(self, rollout: AttemptedRollout, raise_on_exception: bool = False) -> str:
        """Execute one attempted rollout end to end; returns the rollout id."""
        agent = self.get_agent()
        store = self.get_store()
        rollout_id = rollout.rollout_id
        attempt_id = rollout.attempt.attempt_id
        prefix = self._log_prefix(rollout_id)

        resources = await self._resolve_resources(rollout)
        if resources is None:
            message = f"{prefix} No resources found (resources_id={rollout.resources_id!r}); skipping the rollout."
            if raise_on_exception:
                raise RuntimeError(message)
            logger.error(message)
            return rollout_id

        start = time.time()
        spans: List[Any] = []
        status: Literal["failed", "succeeded"] = "failed"
        error: Optional[BaseException] = None
        try:
            await self._trigger_hooks("on_rollout_start", agent=agent, runner=self, rollout=rollout)
            async with self._tracer.trace_context(name=rollout_id, rollout_id=rollout_id, attempt_id=attempt_id):
                await self._trigger_hooks(
                    "on_trace_start", agent=agent, runner=self, tracer=self._tracer, rollout=rollout
                )
                if agent.is_async():
                    method = agent.training_rollout_async if rollout.mode == "train" else agent.validation_rollout_async
                    result = await method(rollout.input, resources=resources, rollout=rollout)
                else:
                    method = agent.training_rollout if rollout.mode == "train" else agent.validation_rollout
                    result = method(rollout.input, resources=resources, rollout=rollout)
                await self._trigger_hooks(
                    "on_trace_end", agent=agent, runner=self, tracer=self._tracer, rollout=rollout
                )
            spans, rollout_spans = await self._write_rollout_result(rollout, result)
            try:
                from rollouthub.emitter import find_final_reward

                final_reward = find_final_reward(rollout_spans)
            except Exception:  # pragma: no cover - informational only
                final_reward = None
            logger.info(
                "%s Completed in %.2fs. Collected %d span(s). Final reward: %s",
                prefix,
                time.time() - start,
                len(rollout_spans),
                final_reward,
            )
            status = "succeeded"
        except Exception as exc:
            logger.exception("%s Exception during rollout.", prefix)
            error = exc
            spans = []
        finally:
            await self._trigger_hooks("on_rollout_end", agent=agent, runner=self, rollout=rollout, spans=spans)
            try:
                await store.update_attempt(rollout_id, attempt_id, status=status)
            except Exception:
                logger.exception("%s Failed to update the attempt status to %s.", prefix, status)
        if error is not None and raise_on_exception:
            raise error
        return rollout_id

    # ------------------------------------------------------------------ iter / step

    async def _sleep_or_stop(self, seconds: float, event: Optional[Any]) -> bool:
        """Sleep ``seconds`` (in 0.1 s slices when an event is given); returns True if the event got set."""
        if event is None:
            return await sleep_unless_abandoned(seconds, None)
        return await sleep_unless_abandoned(seconds, event.is_set) or bool(event.is_set())

    async def _dequeue_or_wait(
        self, store: Any, worker_id: Optional[str], event: Optional[Any]
    ) -> Optional[AttemptedRollout]:
        """One poll: claim a rollout, waiting up to ``poll_interval ± jitter`` for one to be queued.

        With ``dequeue_rollout_or_wait`` (rollouthub stores and clients) the store wakes the runner as soon as a
        rollout is queued, and the wait ends early when ``event`` is set; a store object without it gets the reference
        poll: ``dequeue_rollout``, then a sleep of the interval. A failed dequeue is logged and followed by a sleep of
        the interval.
        """
        interval = self._jittered(self._poll_interval)
        abandoned = event.is_set if event is not None else None
        started = time.monotonic()
        try:
            wait_or_claim = getattr(store, "dequeue_rollout_or_wait", None)
            if wait_or_claim is not None:
                rollout: Optional[AttemptedRollout] = await wait_or_claim(
                    worker_id=worker_id, timeout=interval, abandoned=abandoned
                )
                if rollout is None and time.monotonic() - started < min(interval, _MIN_WAIT_SECONDS) / 2:
                    await self._sleep_or_stop(interval, event)  # a store that returned at once: do not spin
                return rollout
            rollout = await store.dequeue_rollout(worker_id=worker_id)
        except Exception:
            logger.exception("%s Failed to dequeue a rollout.", self._log_prefix())
            rollout = None
        if rollout is None:
            await self._sleep_or_stop(interval, event)
        return rollout

    async def iter(self, *, event: Optional[Any] = None) -> None:
        """Dequeue and execute rollouts until ``event`` is set or ``max_rollouts`` were processed."""
        store = self.get_store()
        worker_id = self.get_worker_id()
        prefix = self._log_prefix()
        processed = 0
        stop_heartbeat = await self._start_heartbeat()
        try:
            while not (event is not None and event.is_set()) and (
                self._max_rollouts is None or processed < self._max_rollouts
            ):
                rollout: Optional[AttemptedRollout] = None
                while rollout is None:
                    if event is not None and event.is_set():
                        break
                    rollout = await self._dequeue_or_wait(store, worker_id, event)
                if rollout is None:
                    logger.info("%s Stop requested while waiting for rollouts.", prefix)
                    return
                try:
                    await self._step_impl(rollout)
                except Exception:  # pragma: no cover - _step_impl already swallows agent errors
                    logger.exception("%s Unexpected error while executing rollout %s.", prefix, rollout.rollout_id)
                processed += 1
                if processed == 1 or processed % 10 == 0:
                    logger.info("%s Progress: %d rollout(s) processed.", prefix, processed)
        finally:
            await stop_heartbeat()
            logger.info("%s Finished: %d rollout(s) processed.", prefix, processed)

    async def step(
        self,
        input: TaskInput,
        *,
        resources: Optional[NamedResources] = None,
        mode: Optional[RolloutMode] = None,
        event: Optional[Any] = None,
    ) -> Rollout:
        """Run one task immediately (bypassing the queue) and return the completed rollout."""
        store = self.get_store()
        resources_id: Optional[str] = None
        if resources is not None:
            update = await store.add_resources(resources)
            resources_id = update.resources_id
        attempted = await store.start_rollout(
            input=input, mode=mode, resources_id=resources_id, worker_id=self.get_worker_id()
        )
        await self._step_impl(attempted, raise_on_exception=True)
        completed = await store.get_rollout_by_id(attempted.rollout_id)
        if completed is None:
            raise RuntimeError(f"Rollout {attempted.rollout_id} could not be fetched after execution.")
        return completed

    # ------------------------------------------------------------------ heartbeats

    def _take_snapshot(self) -> Dict[str, Any]:
        from rollouthub.utils.system_snapshot import system_snapshot

        return system_snapshot(include_gpu=self._heartbeat_include_gpu)

    def _heartbeat_stats(self, snapshot: Optional[Dict[str, Any]], **extra: Any) -> Dict[str, Any]:
        """What a heartbeat carries: the system snapshot, ``heartbeat_interval`` (seconds, so a reader knows when a
        heartbeat is overdue) and ``extra`` (``runner_state="stopped"`` in the last one)."""
        stats: Dict[str, Any] = {**(snapshot or {}), "heartbeat_interval": self._heartbeat_interval}
        node = os.environ.get(RUNNER_NODE_ENV)
        if node:  # the machine the runner runs on, when its execution strategy says (the ray strategy does)
            stats["node"] = node
        return {**stats, **extra}

    async def _send_stopped_heartbeat(
        self, store: LightningStore, worker_id: str, snapshot: Optional[Dict[str, Any]]
    ) -> None:
        """Best effort, within :data:`STOPPED_HEARTBEAT_TIMEOUT_SECONDS`: a last heartbeat whose stats say
        ``"runner_state": "stopped"`` (the dashboard then shows the runner as stopped instead of idle)."""
        stats = self._heartbeat_stats(snapshot, runner_state="stopped")
        try:
            await asyncio.wait_for(store.update_worker(worker_id, stats), timeout=STOPPED_HEARTBEAT_TIMEOUT_SECONDS)
        except asyncio.TimeoutError:
            logger.warning(
                "%s The last heartbeat (runner stopped) timed out after %.1fs.",
                self._log_prefix(),
                STOPPED_HEARTBEAT_TIMEOUT_SECONDS,
            )
        except Exception as exc:
            logger.warning("%s The last heartbeat (runner stopped) failed: %r", self._log_prefix(), exc)

    async def _start_heartbeat(self) -> Any:
        """Start the heartbeat loop; returns an async callable that stops it."""

        async def noop() -> None:
            return None

        if self._heartbeat_interval <= 0:
            return noop
        if self.worker_id is None:
            logger.warning("%s Heartbeats disabled: the runner has no worker id.", self._log_prefix())
            return noop
        if self._heartbeat_launch_mode == "asyncio":
            return self._start_asyncio_heartbeat()
        return self._start_thread_heartbeat()

    def _start_asyncio_heartbeat(self) -> Any:
        store = self.get_store()
        worker_id = self.get_worker_id()
        interval = self._heartbeat_interval
        stop_flag = asyncio.Event()
        last: List[Optional[Dict[str, Any]]] = [None]

        async def loop() -> None:
            while not stop_flag.is_set():
                try:
                    snapshot = await asyncio.wait_for(asyncio.to_thread(self._take_snapshot), timeout=interval)
                except asyncio.TimeoutError:
                    logger.warning("%s Heartbeat snapshot timed out after %.1fs.", self._log_prefix(), interval)
                    snapshot = None
                except asyncio.CancelledError:
                    raise
                except Exception:
                    logger.exception("%s Heartbeat snapshot failed.", self._log_prefix())
                    snapshot = None
                if snapshot is not None:
                    last[0] = snapshot
                    try:
                        await asyncio.wait_for(
                            store.update_worker(worker_id, self._heartbeat_stats(snapshot)), timeout=interval
                        )
                    except asyncio.TimeoutError:
                        logger.warning("%s Heartbeat update timed out after %.1fs.", self._log_prefix(), interval)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        logger.exception("%s Heartbeat update failed.", self._log_prefix())
                try:
                    await asyncio.wait_for(stop_flag.wait(), timeout=self._jittered(interval))
                except asyncio.TimeoutError:
                    pass

        task = asyncio.get_running_loop().create_task(loop(), name=f"{worker_id}-heartbeat")

        async def stop() -> None:
            stop_flag.set()
            try:
                await task
            except asyncio.CancelledError:  # pragma: no cover
                pass
            except Exception:  # pragma: no cover
                logger.exception("%s Heartbeat task failed.", self._log_prefix())
            await self._send_stopped_heartbeat(store, worker_id, last[0])

        return stop

    def _start_thread_heartbeat(self) -> Any:
        store = self.get_store()
        worker_id = self.get_worker_id()
        interval = self._heartbeat_interval
        stop_event = threading.Event()
        latest: List[Optional[Tuple[float, Dict[str, Any]]]] = [None]
        latest_lock = threading.Lock()
        stale_limit = interval + self._interval_jitter + _STALE_GRACE_SECONDS

        def producer() -> None:
            while not stop_event.is_set():
                try:
                    snapshot = self._take_snapshot()
                    with latest_lock:
                        latest[0] = (time.monotonic(), snapshot)
                except Exception:
                    logger.warning("%s Heartbeat snapshot failed.", self._log_prefix(), exc_info=True)
                stop_event.wait(self._jittered(interval))

        def consumer() -> None:
            loop = asyncio.new_event_loop()
            warned_for: Optional[float] = None
            try:
                while not stop_event.is_set():
                    with latest_lock:
                        entry = latest[0]
                    if entry is not None:
                        taken_at, snapshot = entry
                        if time.monotonic() - taken_at > stale_limit:
                            if warned_for != taken_at:
                                logger.warning("%s Heartbeat snapshot is stale; skipping.", self._log_prefix())
                                warned_for = taken_at
                        else:
                            try:
                                loop.run_until_complete(
                                    asyncio.wait_for(
                                        store.update_worker(worker_id, self._heartbeat_stats(snapshot)),
                                        timeout=interval,
                                    )
                                )
                            except Exception as exc:
                                logger.warning("%s Heartbeat update failed: %r", self._log_prefix(), exc)
                    stop_event.wait(self._jittered(interval))
            finally:
                try:
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    loop.close()

        producer_thread = threading.Thread(target=producer, name=f"{worker_id}-heartbeat-producer", daemon=True)
        consumer_thread = threading.Thread(target=consumer, name=f"{worker_id}-heartbeat-consumer", daemon=True)
        producer_thread.start()
        consumer_thread.start()

        async def stop() -> None:
            stop_event.set()
            await asyncio.to_thread(producer_thread.join)
            await asyncio.to_thread(consumer_thread.join)
            with latest_lock:
                entry = latest[0]
            await self._send_stopped_heartbeat(store, worker_id, entry[1] if entry is not None else None)

        return stop
