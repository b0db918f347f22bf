"""Tests for rollouthub.utils.metrics."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import tempfile
import threading
import types
import uuid
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from rollouthub.utils import metrics
from rollouthub.utils.metrics import (
    ConsoleMetricsBackend,
    MetricsBackend,
    MultiMetricsBackend,
    PrometheusMetricsBackend,
    get_prometheus_registry,
    setup_multiprocess_prometheus,
    shutdown_metrics,
)

LOGGER_NAME = "rollouthub.utils.metrics"
REPO_ROOT = Path(__file__).resolve().parents[2]


class FakeTime:
    """Stand-in for the ``time`` module inside ``rollouthub.utils.metrics``."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(metrics, "time", fake)
    return fake


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def log_lines(caplog: pytest.LogCaptureFixture) -> List[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER_NAME and r.levelno == logging.INFO]


# ---------------------------------------------------------------------------------------------------------------------
# Base class: registration and validation
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(params=["base", "console"])
def backend(request: pytest.FixtureRequest) -> MetricsBackend:
    if request.param == "base":
        return MetricsBackend()
    return ConsoleMetricsBackend(log_interval_seconds=1e9)


def test_base_has_no_prometheus() -> None:
    assert MetricsBackend().has_prometheus() is False
    assert ConsoleMetricsBackend().has_prometheus() is False


async def test_identical_reregistration_is_noop(backend: MetricsBackend) -> None:
    backend.register_counter("c", ["a", "b"], group_level=1)
    backend.register_counter("c", ("a", "b"), group_level=1)
    backend.register_histogram("h", ["a"], buckets=[0.1, 1.0])
    backend.register_histogram("h", ["a"], buckets=(0.1, 1.0))
    backend.register_histogram("h2")
    backend.register_histogram("h2")
    await backend.inc_counter("c", labels={"a": "x", "b": "y"})
    await backend.observe_histogram("h", 0.5, labels={"a": "x"})


def test_conflicting_reregistration_raises(backend: MetricsBackend) -> None:
    backend.register_counter("c", ["a", "b"])
    with pytest.raises(ValueError):
        backend.register_counter("c", ["b", "a"])
    with pytest.raises(ValueError):
        backend.register_counter("c", ["a"])
    with pytest.raises(ValueError):
        backend.register_histogram("c", ["a", "b"])

    backend.register_histogram("h", ["a"], buckets=[0.1, 1.0])
    with pytest.raises(ValueError):
        backend.register_histogram("h", ["a"], buckets=[0.1, 2.0])
    with pytest.raises(ValueError):
        backend.register_histogram("h", ["a"])
    with pytest.raises(ValueError):
        backend.register_counter("h", ["a"])


def test_invalid_definitions_raise(backend: MetricsBackend) -> None:
    with pytest.raises(ValueError):
        backend.register_counter("dup", ["a", "a"])
    with pytest.raises(ValueError):
        backend.register_histogram("unsorted", buckets=[1.0, 0.5])
    with pytest.raises(ValueError):
        backend.register_counter("")
    # A rejected definition is not remembered.
    backend.register_counter("dup", ["a"])


async def test_unregistered_and_wrong_kind_raise(backend: MetricsBackend) -> None:
    with pytest.raises(ValueError, match="not registered"):
        await backend.inc_counter("missing")
    with pytest.raises(ValueError, match="not registered"):
        await backend.observe_histogram("missing", 1.0)
    backend.register_counter("c")
    backend.register_histogram("h")
    with pytest.raises(ValueError):
        await backend.observe_histogram("c", 1.0)
    with pytest.raises(ValueError):
        await backend.inc_counter("h")


async def test_missing_label_messages(backend: MetricsBackend) -> None:
    backend.register_counter("my.counter", ["method", "status"])
    backend.register_histogram("my.hist", ["path"])
    with pytest.raises(ValueError) as exc_info:
        await backend.inc_counter("my.counter", labels={"method": "get"})
    assert str(exc_info.value) == "Label 'status' is required for Counter 'my.counter'."
    with pytest.raises(ValueError) as exc_info:
        await backend.inc_counter("my.counter")
    assert str(exc_info.value) == "Label 'method' is required for Counter 'my.counter'."
    with pytest.raises(ValueError) as exc_info:
        await backend.observe_histogram("my.hist", 0.1, labels={"other": "x"})
    assert str(exc_info.value) == "Label 'path' is required for Histogram 'my.hist'."
    # Extra labels are accepted and ignored.
    await backend.inc_counter("my.counter", labels={"status": "OK", "method": "get", "extra": "1"})


async def test_negative_counter_increment_rejected(backend: MetricsBackend) -> None:
    backend.register_counter("c")
    with pytest.raises(ValueError):
        await backend.inc_counter("c", -1.0)


# ---------------------------------------------------------------------------------------------------------------------
# Console backend
# ---------------------------------------------------------------------------------------------------------------------


def test_format_duration_units() -> None:
    fmt = metrics._format_duration
    assert fmt(2.5) == "2.50s"
    assert fmt(1.0) == "1.00s"
    assert fmt(0.0123) == "12.30ms"
    assert fmt(0.001) == "1.00ms"
    assert fmt(4.5e-6) == "4.50µs"
    assert fmt(7e-9) == "7.00ns"
    assert fmt(0.0) == "0.00ns"


async def test_console_counter_rate_and_log_interval(clock: FakeTime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=60.0, log_interval_seconds=10.0)
    backend.register_counter("c", ["k"], group_level=1)

    for t in (0.0, 2.0, 4.0):
        clock.now = t
        await backend.inc_counter("c", 2.0, labels={"k": "a"})
    assert log_lines(caplog) == []

    clock.now = 10.0
    await backend.inc_counter("c", 4.0, labels={"k": "a"})
    # 10 units over 10 seconds since the group was first seen.
    assert log_lines(caplog) == ["c{k=a}=1.00/s"]

    # At most one line per interval.
    clock.now = 15.0
    await backend.inc_counter("c", labels={"k": "a"})
    clock.now = 19.9
    await backend.inc_counter("c", labels={"k": "a"})
    assert len(log_lines(caplog)) == 1

    clock.now = 20.0
    await backend.inc_counter("c", labels={"k": "a"})
    # 13 units over 20 seconds.
    assert log_lines(caplog)[-1] == "c{k=a}=0.65/s"
    assert caplog.records[-1].levelno == logging.INFO


async def test_console_counter_sliding_window(clock: FakeTime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=5.0, log_interval_seconds=1.0)
    backend.register_counter("c")
    await backend.inc_counter("c", 100.0)  # t=0, falls out of the window later
    clock.now = 10.0
    await backend.inc_counter("c", 3.0)
    # Only the recent increment counts; the span is capped at the window (5 s).
    assert log_lines(caplog) == ["c=0.60/s"]
    state = backend._counter_state[("c", ())]
    assert len(state.slots) == 1


async def test_console_rate_span_is_at_least_log_interval(clock: FakeTime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=60.0, log_interval_seconds=10.0)
    backend.register_counter("c")
    clock.now = 10.0
    await backend.inc_counter("c", 5.0)  # group first seen right now: span = max(0, 10) = 10
    assert log_lines(caplog) == ["c=0.50/s"]


async def test_console_histogram_percentiles(clock: FakeTime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=60.0, log_interval_seconds=10.0)
    backend.register_histogram("lat", ["op"], group_level=1)
    for i in range(1, 101):
        clock.now = i * 0.05
        await backend.observe_histogram("lat", i / 1000.0, labels={"op": "get"})
    assert log_lines(caplog) == []
    clock.now = 10.0
    await backend.observe_histogram("lat", 0.0005, labels={"op": "get"})
    # 101 observations: 0.5ms plus 1..100 ms (nearest rank).
    assert log_lines(caplog) == ["lat{op=get}=50.00ms,95.00ms,99.00ms"]


async def test_console_histogram_units_and_window(clock: FakeTime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=5.0, log_interval_seconds=1.0)
    backend.register_histogram("h")
    await backend.observe_histogram("h", 100.0)  # expires before the log
    clock.now = 10.0
    await backend.observe_histogram("h", 2.5)
    assert log_lines(caplog) == ["h=2.50s,2.50s,2.50s"]
    clock.now = 11.0
    await backend.observe_histogram("h", 3e-6)
    assert log_lines(caplog)[-1] == "h=3.00µs,2.50s,2.50s"


async def test_console_log_line_sorted_and_joined(clock: FakeTime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=60.0, log_interval_seconds=10.0)
    backend.register_counter("b.total", ["method", "status"], group_level=2)
    backend.register_histogram("a.latency", ["method"], group_level=1)
    await backend.inc_counter("b.total", 10.0, labels={"status": "OK", "method": "x"})
    await backend.inc_counter("b.total", 20.0, labels={"status": "OK", "method": "a"})
    await backend.observe_histogram("a.latency", 0.002, labels={"method": "x"})
    clock.now = 10.0
    await backend.inc_counter("b.total", 30.0, labels={"method": "x", "status": "ValueError"})
    lines = log_lines(caplog)
    assert len(lines) == 1
    # Label order follows registration order; entries are sorted and separated by two spaces.
    assert lines[0] == (
        "a.latency{method=x}=2.00ms,2.00ms,2.00ms  "
        "b.total{method=a,status=OK}=2.00/s  "
        "b.total{method=x,status=OK}=1.00/s  "
        "b.total{method=x,status=ValueError}=3.00/s"
    )


async def test_console_group_level_merging(clock: FakeTime) -> None:
    backend = ConsoleMetricsBackend(log_interval_seconds=1e9)
    backend.register_counter("c1", ["a", "b"], group_level=1)
    backend.register_counter("c2", ["a", "b"])  # no group level: everything merged
    backend.register_histogram("h", ["a", "b"], group_level=5)  # larger than the number of labels
    for b in ("1", "2"):
        await backend.inc_counter("c1", labels={"a": "x", "b": b})
        await backend.inc_counter("c2", labels={"a": "x", "b": b})
        await backend.observe_histogram("h", 0.1, labels={"a": "x", "b": b})

    assert set(backend._counter_state) == {("c1", (("a", "x"),)), ("c2", ())}
    assert set(backend._hist_state) == {("h", (("a", "x"), ("b", "1"))), ("h", (("a", "x"), ("b", "2")))}
    assert sum(slot[1] for slot in backend._counter_state[("c1", (("a", "x"),))].slots) == 2.0


async def test_console_backend_group_level_overrides_metric(clock: FakeTime) -> None:
    finer = ConsoleMetricsBackend(log_interval_seconds=1e9, group_level=2)
    merged = ConsoleMetricsBackend(log_interval_seconds=1e9, group_level=0)
    for backend in (finer, merged):
        backend.register_counter("c", ["a", "b"], group_level=1)
        await backend.inc_counter("c", labels={"a": "x", "b": "1"})
        await backend.inc_counter("c", labels={"a": "y", "b": "2"})
    assert set(finer._counter_state) == {("c", (("a", "x"), ("b", "1"))), ("c", (("a", "y"), ("b", "2")))}
    assert set(merged._counter_state) == {("c", ())}


async def test_console_drops_expired_groups(clock: FakeTime, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=5.0, log_interval_seconds=1.0)
    backend.register_counter("c", ["k"], group_level=1)
    backend.register_histogram("h", ["k"], group_level=1)
    await backend.inc_counter("c", labels={"k": "old"})
    await backend.observe_histogram("h", 1.0, labels={"k": "old"})
    clock.now = 100.0
    await backend.inc_counter("c", labels={"k": "new"})
    assert set(backend._counter_state) == {("c", (("k", "new"),))}
    assert backend._hist_state == {}
    # The new group was first seen just now: its span is the log interval (1 s).
    assert log_lines(caplog) == ["c{k=new}=1.00/s"]


async def test_console_memory_is_bounded(clock: FakeTime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ConsoleMetricsBackend, "MAX_SAMPLES_PER_KEY", 50)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=60.0, log_interval_seconds=1e9)
    backend.register_counter("c")
    backend.register_histogram("h")
    for i in range(1000):
        clock.now = i * 1e-4  # far below the slot width (60 ms)
        await backend.inc_counter("c")
        await backend.observe_histogram("h", float(i))
    counter_state = backend._counter_state[("c", ())]
    assert len(counter_state.slots) <= 2
    assert sum(slot[1] for slot in counter_state.slots) == 1000.0
    events = backend._hist_state[("h", ())].events
    assert len(events) == 50
    assert [value for _, value in events] == [float(i) for i in range(950, 1000)]


async def test_console_unbounded_window(
    clock: FakeTime, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    monkeypatch.setattr(ConsoleMetricsBackend, "MAX_SAMPLES_PER_KEY", 100)
    clock.now = 0.0
    backend = ConsoleMetricsBackend(window_seconds=None, log_interval_seconds=1000.0)
    backend.register_counter("c")
    backend.register_histogram("h")
    for i in range(10_000):
        clock.now = i * 0.1
        await backend.inc_counter("c")
        await backend.observe_histogram("h", 0.5)
    state = backend._hist_state[("h", ())]
    assert len(state.samples) == 100
    assert state.seen == 10_000
    assert backend._counter_state[("c", ())].total == 10_000
    assert log_lines(caplog) == []  # all events happened before the first interval elapsed
    clock.now = 1000.0
    await backend.inc_counter("c")
    # 10_001 increments over 1000 s since the counter was first seen.
    assert log_lines(caplog) == ["c=10.00/s  h=500.00ms,500.00ms,500.00ms"]


def test_console_invalid_arguments() -> None:
    with pytest.raises(ValueError):
        ConsoleMetricsBackend(window_seconds=0)
    with pytest.raises(ValueError):
        ConsoleMetricsBackend(log_interval_seconds=-1)
    assert ConsoleMetricsBackend(window_seconds=float("inf")).window_seconds is None


def test_console_thread_safety() -> None:
    backend = ConsoleMetricsBackend(window_seconds=None, log_interval_seconds=1e9)
    backend.register_counter("c", ["t"])

    async def work(tid: int) -> None:
        for _ in range(500):
            await backend.inc_counter("c", labels={"t": str(tid)})

    threads = [threading.Thread(target=asyncio.run, args=(work(i),)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert backend._counter_state[("c", ())].total == 4000


# ---------------------------------------------------------------------------------------------------------------------
# Prometheus backend (real prometheus_client)
# ---------------------------------------------------------------------------------------------------------------------


def prom(name: str) -> str:
    return name.replace(".", "_")


async def test_prometheus_counter_and_histogram() -> None:
    from prometheus_client import REGISTRY

    backend = PrometheusMetricsBackend()
    assert backend.has_prometheus() is True
    counter = unique("rh.test.count") + ".total"
    hist = unique("rh.test.lat")
    backend.register_counter(counter, ["method", "status"])
    backend.register_histogram(hist, ["method"], buckets=[0.1, 0.5, 1.0])
    await backend.inc_counter(counter, labels={"status": "OK", "method": "get"})
    await backend.inc_counter(counter, 2.0, labels={"method": "get", "status": "OK", "ignored": "x"})
    await backend.observe_histogram(hist, 0.3, labels={"method": "get"})
    await backend.observe_histogram(hist, 0.05, labels={"method": "get"})

    assert REGISTRY.get_sample_value(prom(counter), {"method": "get", "status": "OK"}) == 3.0
    labels = {"method": "get"}
    assert REGISTRY.get_sample_value(prom(hist) + "_count", labels) == 2.0
    assert REGISTRY.get_sample_value(prom(hist) + "_sum", labels) == pytest.approx(0.35)
    assert REGISTRY.get_sample_value(prom(hist) + "_bucket", {**labels, "le": "0.1"}) == 1.0
    assert REGISTRY.get_sample_value(prom(hist) + "_bucket", {**labels, "le": "0.5"}) == 2.0
    assert REGISTRY.get_sample_value(prom(hist) + "_bucket", {**labels, "le": "0.005"}) is None

    with pytest.raises(ValueError, match="Label 'status' is required for Counter"):
        await backend.inc_counter(counter, labels={"method": "get"})


async def test_prometheus_default_buckets_and_no_labels() -> None:
    from prometheus_client import REGISTRY

    backend = PrometheusMetricsBackend()
    counter = unique("rh.nolabels")
    hist = unique("rh.defaultbuckets")
    backend.register_counter(counter)
    backend.register_histogram(hist)
    await backend.inc_counter(counter, 4.0)
    await backend.observe_histogram(hist, 0.004)
    assert REGISTRY.get_sample_value(prom(counter) + "_total") == 4.0
    # prometheus_client default buckets start at 0.005
    assert REGISTRY.get_sample_value(prom(hist) + "_bucket", {"le": "0.005"}) == 1.0


async def test_prometheus_backend_recreated_reuses_metrics() -> None:
    from prometheus_client import REGISTRY

    name = unique("rh.reuse")
    first = PrometheusMetricsBackend()
    first.register_counter(name, ["k"])
    second = PrometheusMetricsBackend()
    second.register_counter(name, ["k"])  # must not raise "Duplicated timeseries"
    await first.inc_counter(name, labels={"k": "v"})
    await second.inc_counter(name, labels={"k": "v"})
    assert REGISTRY.get_sample_value(prom(name) + "_total", {"k": "v"}) == 2.0

    third = PrometheusMetricsBackend()
    with pytest.raises(ValueError):
        third.register_counter(name, ["other"])
    with pytest.raises(ValueError):
        third.register_histogram(name, ["k"])


def test_prometheus_name_collision() -> None:
    suffix = uuid.uuid4().hex[:10]
    backend = PrometheusMetricsBackend()
    backend.register_counter(f"rh.collide.{suffix}")
    with pytest.raises(ValueError, match="collides"):
        backend.register_counter(f"rh_collide.{suffix}")
    with pytest.raises(ValueError, match="collides"):
        backend.register_histogram(f"rh.collide_{suffix}")
    # Colliding with a metric created by another backend instance is also rejected.
    with pytest.raises(ValueError, match="collides"):
        PrometheusMetricsBackend().register_counter(f"rh_collide_{suffix}")
    # The original registration is still usable and the rejected ones were not remembered.
    backend.register_counter(f"rh.collide.{suffix}")
    with pytest.raises(ValueError, match="not registered"):
        asyncio.run(backend.inc_counter(f"rh_collide.{suffix}"))


class _StubMetric:
    def __init__(
        self, registry: List[Tuple[str, Tuple[Any, ...], Dict[str, Any]]], kind: str, *args: Any, **kwargs: Any
    ):
        self.calls: List[Tuple[str, Any]] = []
        self.kind = kind
        registry.append((kind, args, kwargs))

    def labels(self, **labels: Any) -> _StubMetric:
        self.calls.append(("labels", labels))
        return self

    def inc(self, amount: float = 1.0) -> None:
        self.calls.append(("inc", amount))

    def observe(self, value: float) -> None:
        self.calls.append(("observe", value))


@pytest.fixture
def stub_prometheus(monkeypatch: pytest.MonkeyPatch) -> List[Tuple[str, Tuple[Any, ...], Dict[str, Any]]]:
    created: List[Tuple[str, Tuple[Any, ...], Dict[str, Any]]] = []
    module = types.ModuleType("prometheus_client")
    module.Counter = lambda *a, **k: _StubMetric(created, "Counter", *a, **k)  # type: ignore[attr-defined]
    module.Histogram = lambda *a, **k: _StubMetric(created, "Histogram", *a, **k)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "prometheus_client", module)
    return created


async def test_prometheus_construction_calls(
    stub_prometheus: List[Tuple[str, Tuple[Any, ...], Dict[str, Any]]],
) -> None:
    backend = PrometheusMetricsBackend()
    backend.register_counter("agl.store.total", ["method", "store_pubmeth", "status"], group_level=1)
    backend.register_histogram("agl.store.latency", ["method"], buckets=[0.1, 1.0])
    backend.register_histogram("agl.plain")
    assert stub_prometheus == [
        (
            "Counter",
            ("agl_store_total", "Counter agl.store.total"),
            {"labelnames": ("method", "store_pubmeth", "status")},
        ),
        (
            "Histogram",
            ("agl_store_latency", "Histogram agl.store.latency"),
            {"labelnames": ("method",), "buckets": (0.1, 1.0)},
        ),
        ("Histogram", ("agl_plain", "Histogram agl.plain"), {"labelnames": ()}),
    ]
    await backend.inc_counter("agl.store.total", 2.0, labels={"status": "OK", "store_pubmeth": "p", "method": "m"})
    await backend.observe_histogram("agl.store.latency", 0.25, labels={"method": "m"})
    counter = backend._metrics["agl.store.total"]
    assert counter.calls == [("labels", {"method": "m", "store_pubmeth": "p", "status": "OK"}), ("inc", 2.0)]
    assert backend._metrics["agl.store.latency"].calls == [("labels", {"method": "m"}), ("observe", 0.25)]


def test_prometheus_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"rollouthub\[prometheus\]"):
        PrometheusMetricsBackend()
    with pytest.raises(ImportError, match=r"rollouthub\[prometheus\]"):
        get_prometheus_registry()


# ---------------------------------------------------------------------------------------------------------------------
# Multi backend
# ---------------------------------------------------------------------------------------------------------------------


def test_multi_requires_backends() -> None:
    with pytest.raises(ValueError):
        MultiMetricsBackend([])


async def test_multi_fans_out(clock: FakeTime) -> None:
    first = ConsoleMetricsBackend(window_seconds=None, log_interval_seconds=1e9)
    second = ConsoleMetricsBackend(window_seconds=None, log_interval_seconds=1e9, group_level=1)
    multi = MultiMetricsBackend([first, second])
    assert multi.has_prometheus() is False
    multi.register_counter("c", ["a", "b"], group_level=2)
    multi.register_histogram("h", ["a"], buckets=[0.5, 1.0], group_level=1)
    multi.register_counter("c", ["a", "b"], group_level=2)  # idempotent through the fan-out
    with pytest.raises(ValueError):
        multi.register_counter("c", ["a"])

    await multi.inc_counter("c", 3.0, labels={"a": "x", "b": "y"})
    await multi.observe_histogram("h", 0.7, labels={"a": "x"})
    assert first._counter_state[("c", (("a", "x"), ("b", "y")))].total == 3.0
    assert second._counter_state[("c", (("a", "x"),))].total == 3.0
    assert first._hist_state[("h", (("a", "x"),))].samples == [0.7]
    assert second._hist_state[("h", (("a", "x"),))].samples == [0.7]

    with pytest.raises(ValueError, match="Label 'b' is required for Counter 'c'."):
        await multi.inc_counter("c", labels={"a": "x"})
    with pytest.raises(ValueError, match="not registered"):
        await multi.observe_histogram("nope", 1.0)
    assert first._counter_state[("c", (("a", "x"), ("b", "y")))].total == 3.0


async def test_multi_with_prometheus() -> None:
    from prometheus_client import REGISTRY

    console = ConsoleMetricsBackend(window_seconds=None, log_interval_seconds=1e9)
    multi = MultiMetricsBackend([PrometheusMetricsBackend(), console])
    assert multi.has_prometheus() is True
    name = unique("rh.multi")
    multi.register_counter(name, ["k"], group_level=1)
    await multi.inc_counter(name, labels={"k": "v"})
    assert REGISTRY.get_sample_value(prom(name) + "_total", {"k": "v"}) == 1.0
    assert console._counter_state[(name, (("k", "v"),))].total == 1.0


# ---------------------------------------------------------------------------------------------------------------------
# Multiprocess helpers
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def no_multiproc_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # setenv first so that monkeypatch restores the original state even though the code under test writes os.environ.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "placeholder")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")


def test_get_prometheus_registry_default(no_multiproc_env: None) -> None:
    from prometheus_client import REGISTRY

    assert get_prometheus_registry() is REGISTRY


def test_setup_multiprocess_creates_temp_dir(
    no_multiproc_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    directory = setup_multiprocess_prometheus()
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == directory
    assert Path(directory).is_dir()
    assert Path(directory).parent == tmp_path


def test_setup_multiprocess_existing_dir_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "mp"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(target))
    caplog.set_level(logging.WARNING, logger=LOGGER_NAME)
    assert setup_multiprocess_prometheus() == str(target)
    assert target.is_dir()
    warnings = [r for r in caplog.records if r.name == LOGGER_NAME and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "wiped" in warnings[0].getMessage()


def test_multiprocess_registry_aggregates_child_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import REGISTRY

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    script = (
        "import asyncio\n"
        "from rollouthub.utils.metrics import PrometheusMetricsBackend\n"
        "b = PrometheusMetricsBackend()\n"
        "b.register_counter('rh.mp.total', ['k'])\n"
        "b.register_histogram('rh.mp.latency', ['k'], buckets=[0.1, 1.0])\n"
        "asyncio.run(b.inc_counter('rh.mp.total', 2.0, labels={'k': 'v'}))\n"
        "asyncio.run(b.observe_histogram('rh.mp.latency', 0.5, labels={'k': 'v'}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    assert len(list(tmp_path.glob("counter_*.db"))) == 2

    registry = get_prometheus_registry()
    assert registry is not REGISTRY
    assert registry.get_sample_value("rh_mp_total", {"k": "v"}) == 4.0
    assert registry.get_sample_value("rh_mp_latency_count", {"k": "v"}) == 2.0
    assert registry.get_sample_value("rh_mp_latency_bucket", {"k": "v", "le": "1.0"}) == 2.0
    # A fresh registry each time.
    assert get_prometheus_registry() is not registry


def test_shutdown_metrics_marks_process_dead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = tmp_path / "gauge_livesum_4242.db"
    other = tmp_path / "gauge_livesum_4343.db"
    counter = tmp_path / "counter_4242.db"
    for path in (live, other, counter):
        path.write_bytes(b"")
    worker = types.SimpleNamespace(pid=4242)

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "placeholder")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    shutdown_metrics(None, worker)  # no multiprocess dir: no-op
    assert live.exists()

    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    shutdown_metrics(None, None)  # no worker: no-op
    assert live.exists()
    shutdown_metrics(object(), worker, "extra", flag=True)
    assert not live.exists()
    assert other.exists()
    assert counter.exists()  # counters of dead processes are still aggregated


def test_shutdown_metrics_tolerates_missing_prometheus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = tmp_path / "gauge_livesum_4242.db"
    live.write_bytes(b"")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.setitem(sys.modules, "prometheus_client.multiprocess", None)
    shutdown_metrics(worker=types.SimpleNamespace(pid=4242))
    assert live.exists()


def test_public_api_exported() -> None:
    assert set(metrics.__all__) == {
        "MetricsBackend",
        "ConsoleMetricsBackend",
        "PrometheusMetricsBackend",
        "MultiMetricsBackend",
        "setup_multiprocess_prometheus",
        "get_prometheus_registry",
        "mount_prometheus",
        "shutdown_metrics",
    }
    for name in metrics.__all__:
        assert getattr(metrics, name).__doc__
