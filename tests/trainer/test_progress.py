"""The progress line of ``Trainer.fit``: what it says, where it goes, when it is silent, and how to turn it off."""

from __future__ import annotations

import asyncio
import io
import logging
import pickle
import threading
import time
from typing import Any, List

import pytest

import rollouthub as agl
from rollouthub.algorithm.fast import Baseline
from rollouthub.store import InMemoryLightningStore
from rollouthub.trainer import Trainer
from rollouthub.trainer.progress import (
    DEFAULT_INTERVAL_SECONDS,
    ProgressLine,
    RolloutCounts,
    format_progress,
    progress_line_from,
    read_rollout_counts,
    with_progress_line,
)

pytestmark = pytest.mark.timeout(120)


class RecordingStream(io.StringIO):
    """A text stream that remembers every write and signals the first one."""

    def __init__(self, terminal: bool = False) -> None:
        super().__init__()
        self.terminal = terminal
        self.writes: List[str] = []
        self.first_write = threading.Event()

    def write(self, text: str) -> int:
        self.writes.append(text)
        self.first_write.set()
        return super().write(text)

    def isatty(self) -> bool:
        return self.terminal


async def _wait_until(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _finish(store: InMemoryLightningStore, n: int, status: Any = "succeeded") -> None:
    for _ in range(n):
        attempted = await store.start_rollout(input={})
        await store.update_attempt(attempted.rollout_id, attempted.attempt.attempt_id, status=status)


def test_format_counts_this_run_only() -> None:
    start = RolloutCounts(queued=0, running=0, succeeded=5, failed=1)
    now = RolloutCounts(queued=3, running=2, succeeded=13, failed=2)
    assert format_progress(now, start, 4.0) == (
        "Progress: 9 rollouts finished (1 failed), 2 running, 3 queued | 2.25 rollouts/s | 4s elapsed"
    )
    assert format_progress(start, start, 0.0, final=True).startswith("Done: 0 rollouts finished, 0 running")


async def test_counts_read_from_the_store() -> None:
    store = InMemoryLightningStore()
    await store.enqueue_rollout(input={})
    await store.start_rollout(input={})
    await _finish(store, 2)
    await _finish(store, 1, status="failed")
    assert await read_rollout_counts(store) == RolloutCounts(queued=1, running=1, succeeded=2, failed=1)


async def test_plain_lines_every_interval_then_a_final_line() -> None:
    store = InMemoryLightningStore()
    await _finish(store, 4)  # an earlier run's rollouts: not counted as this run's
    stream = RecordingStream()
    async with ProgressLine(interval=0.05, stream=stream).watch(store):
        await _finish(store, 3)
        await store.enqueue_rollout(input={})
        await _wait_until(lambda: any("3 rollouts finished" in w for w in stream.writes))
    lines = stream.getvalue().splitlines()
    assert all(line.startswith("Progress: ") for line in lines[:-1])
    assert lines[-1].startswith("Done: 3 rollouts finished, 0 running, 1 queued | ")
    assert "\r" not in stream.getvalue()


async def test_terminal_gets_one_line_updated_in_place() -> None:
    store = InMemoryLightningStore()
    stream = RecordingStream(terminal=True)
    async with ProgressLine(interval=0.05, stream=stream).watch(store):
        await _finish(store, 2)
        await _wait_until(lambda: len(stream.writes) >= 2)
    assert all(w.startswith("\r\x1b[2K") for w in stream.writes)
    assert all(not w.endswith("\n") for w in stream.writes[:-1])
    assert stream.writes[-1].startswith("\r\x1b[2KDone: 2 rollouts finished") and stream.writes[-1].endswith("\n")


async def test_runs_shorter_than_the_interval_print_nothing() -> None:
    store = InMemoryLightningStore()
    stream = RecordingStream()
    async with ProgressLine(interval=60, stream=stream).watch(store):
        await _finish(store, 2)
    assert stream.writes == []


async def test_goes_to_logging_when_logging_shows_it(caplog: pytest.LogCaptureFixture) -> None:
    store = InMemoryLightningStore()
    with caplog.at_level(logging.INFO, logger="rollouthub.trainer.progress"):
        async with ProgressLine(interval=0.05).watch(store):
            await _finish(store, 1)
            await _wait_until(lambda: "Progress: 1 rollouts finished" in caplog.text)
    assert "Done: 1 rollouts finished" in caplog.text


async def test_goes_to_stderr_when_logging_does_not_show_it(capsys: pytest.CaptureFixture[str]) -> None:
    store = InMemoryLightningStore()
    assert not logging.getLogger("rollouthub.trainer.progress").isEnabledFor(logging.INFO)
    async with ProgressLine(interval=0.05).watch(store):
        await _finish(store, 1)
        await _wait_until(lambda: "Progress: 1 rollouts finished" in capsys.readouterr().err)


async def test_a_failing_store_never_breaks_the_run() -> None:
    class BrokenStore(InMemoryLightningStore):
        async def query_rollouts(self, **kwargs: Any) -> Any:  # type: ignore[override]
            raise RuntimeError("store down")

    stream = RecordingStream()
    async with ProgressLine(interval=0.01, stream=stream).watch(BrokenStore()):
        pass
    assert stream.writes == []


def test_trainer_setting() -> None:
    default = Trainer().progress
    assert isinstance(default, ProgressLine) and default.interval == DEFAULT_INTERVAL_SECONDS
    assert Trainer(progress=False).progress is None
    assert progress_line_from(None) is None
    assert progress_line_from(2).interval == 2.0  # type: ignore[union-attr]
    line = ProgressLine(interval=1.5)
    assert Trainer(progress=line).progress is line
    with pytest.raises(ValueError, match="positive number of seconds, got -1"):
        Trainer(progress=-1)
    with pytest.raises(ValueError, match="progress must be True, False, a positive number"):
        Trainer(progress="yes")  # type: ignore[arg-type]


def test_fit_shows_progress_while_rollouts_run() -> None:
    stream = RecordingStream()

    @agl.rollout
    def agent(task: Any, prompt_template: agl.PromptTemplate) -> float:
        # The first rollout holds on until a progress line was written: the line appears while the run goes on.
        if task == 0:
            assert stream.first_write.wait(30), "no progress line while the rollout ran"
        return 1.0

    trainer = Trainer(
        algorithm=Baseline(span_verbosity="none"),
        n_runners=1,
        strategy="shm",
        tracer=agl.OtelTracer(),
        progress=ProgressLine(interval=0.05, stream=stream),
        initial_resources={"prompt_template": agl.PromptTemplate(template="{q}", engine="f-string")},
    )
    trainer.fit(agent, train_dataset=[0, 1, 2])
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("Progress: 0 rollouts finished")
    assert lines[-1].startswith("Done: 3 rollouts finished, 0 running, 0 queued")


async def _bundle(store: Any, event: Any) -> None:
    return None


def test_off_leaves_the_algorithm_bundle_alone() -> None:
    assert with_progress_line(_bundle, progress_line_from(False)) is _bundle
    wrapped = with_progress_line(_bundle, ProgressLine())
    assert wrapped is not _bundle and pickle.loads(pickle.dumps(wrapped)) is not None  # goes to a child process too
