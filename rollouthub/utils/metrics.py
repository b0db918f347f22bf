"""Metrics backends used by the store, the collections layer and the HTTP server.

The module offers a small, backend-agnostic API (:class:`MetricsBackend`) with two kinds of metrics:

* **counters** (``register_counter`` / ``inc_counter``), and
* **histograms** (``register_histogram`` / ``observe_histogram``).

Concrete backends:

* :class:`ConsoleMetricsBackend` aggregates events over a sliding time window and periodically logs a one-line summary
  (rates for counters, p50/p95/p99 for histograms).
* :class:`PrometheusMetricsBackend` forwards everything to ``prometheus_client`` (optional dependency).
* :class:`MultiMetricsBackend` fans every call out to several backends.

Helpers for Prometheus multiprocess mode (gunicorn style deployments) are provided as well:
:func:`setup_multiprocess_prometheus`, :func:`get_prometheus_registry` and :func:`shutdown_metrics`.
"""

from __future__ import annotations

import logging
import math
import os
import random
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Literal, Optional, Tuple

__all__ = [
    "MetricsBackend",
    "ConsoleMetricsBackend",
    "PrometheusMetricsBackend",
    "MultiMetricsBackend",
    "setup_multiprocess_prometheus",
    "get_prometheus_registry",
    "mount_prometheus",
    "shutdown_metrics",
]

logger = logging.getLogger(__name__)

MetricKind = Literal["counter", "histogram"]
LabelKey = Tuple[Tuple[str, Any], ...]
"""Label key used by the console backend: ``((label_name, label_value), ...)`` truncated to the group level."""

_KIND_DISPLAY: Dict[str, str] = {"counter": "Counter", "histogram": "Histogram"}

# ---------------------------------------------------------------------------------------------------------------------
# Base class
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _MetricDefinition:
    """Registered definition of a metric (shared by all backends)."""

    kind: MetricKind
    name: str
    label_names: Tuple[str, ...]
    buckets: Optional[Tuple[float, ...]]
    group_level: Optional[int]

    def same_shape(self, other: _MetricDefinition) -> bool:
        """Whether two definitions are identical for re-registration purposes (``group_level`` is not compared)."""
        return self.kind == other.kind and self.label_names == other.label_names and self.buckets == other.buckets

    def label_values(self, labels: Optional[Mapping[str, Any]]) -> Tuple[Any, ...]:
        """Extract label values in registration order, raising ``ValueError`` for missing labels."""
        names = self.label_names
        if not names:
            return ()
        if labels is None:
            labels = {}
        try:
            return tuple([labels[label] for label in names])
        except KeyError:
            for label in names:
                if label not in labels:
                    raise ValueError(
                        f"Label '{label}' is required for {_KIND_DISPLAY[self.kind]} '{self.name}'."
                    ) from None
            raise  # pragma: no cover - unreachable


def _normalize_label_names(name: str, label_names: Optional[Sequence[str]]) -> Tuple[str, ...]:
    if label_names is None:
        return ()
    if isinstance(label_names, str):
        raise TypeError(f"label_names for metric '{name}' must be a sequence of strings, not a string.")
    result = tuple(label_names)
    for label in result:
        if not isinstance(label, str) or not label:
            raise ValueError(f"Invalid label name {label!r} for metric '{name}'.")
    if len(set(result)) != len(result):
        raise ValueError(f"Duplicated label names for metric '{name}': {list(result)}.")
    return result


def _normalize_buckets(name: str, buckets: Optional[Sequence[float]]) -> Optional[Tuple[float, ...]]:
    if buckets is None:
        return None
    result = tuple(float(b) for b in buckets)
    if not result:
        raise ValueError(f"Histogram '{name}' must have at least one bucket.")
    if any(nxt <= cur for cur, nxt in zip(result[:-1], result[1:], strict=False)):
        raise ValueError(f"Buckets of histogram '{name}' must be strictly increasing: {list(result)}.")
    return result


class MetricsBackend:
    """Base class of all metrics backends.

    The base class implements registration and label validation once; concrete backends override the
    ``_on_register`` / ``_record_counter`` / ``_record_histogram`` hooks, which receive a validated definition and the
    label values in registration order.

    Rules:

    * Registering the same name again with an identical definition (kind, label names, buckets) is a no-op; registering
      it with different label names/buckets or as the other kind raises ``ValueError``.
    * Incrementing/observing an unregistered metric raises ``ValueError``.
    * Every registered label must be present in ``labels``
      (``ValueError("Label '<l>' is required for Counter|Histogram '<name>'.")``); extra labels are ignored.
    """

    def __init__(self) -> None:
        self._definitions: Dict[str, _MetricDefinition] = {}
        self._registration_lock = threading.Lock()

    # -- public API ---------------------------------------------------------------------------------------------------

    def has_prometheus(self) -> bool:
        """Whether this backend exports metrics through ``prometheus_client``."""
        return False

    def register_counter(
        self,
        name: str,
        label_names: Optional[Sequence[str]] = None,
        group_level: Optional[int] = None,
    ) -> None:
        """Register a counter.

        Args:
            name: Logical metric name (e.g. ``"agl.store.total"``).
            label_names: Label names, in the order used for grouping and export.
            group_level: Number of leading labels used to group the metric in aggregated views (console backend).
        """
        self._register(_MetricDefinition("counter", name, _normalize_label_names(name, label_names), None, group_level))

    def register_histogram(
        self,
        name: str,
        label_names: Optional[Sequence[str]] = None,
        buckets: Optional[Sequence[float]] = None,
        group_level: Optional[int] = None,
    ) -> None:
        """Register a histogram.

        Args:
            name: Logical metric name (e.g. ``"agl.store.latency"``).
            label_names: Label names, in the order used for grouping and export.
            buckets: Upper bounds of the histogram buckets (strictly increasing); backend default when ``None``.
            group_level: Number of leading labels used to group the metric in aggregated views (console backend).
        """
        definition = _MetricDefinition(
            "histogram",
            name,
            _normalize_label_names(name, label_names),
            _normalize_buckets(name, buckets),
            group_level,
        )
        self._register(definition)

    async def inc_counter(self, name: str, amount: float = 1.0, labels: Optional[Mapping[str, Any]] = None) -> None:
        """Increment a registered counter by ``amount`` (must be non-negative)."""
        definition = self._lookup(name, "counter")
        values = definition.label_values(labels)
        if amount < 0:
            raise ValueError(f"Counter '{name}' can only be incremented by a non-negative amount, got {amount}.")
        self._record_counter(definition, amount, values)

    async def observe_histogram(self, name: str, value: float, labels: Optional[Mapping[str, Any]] = None) -> None:
        """Record one observation ``value`` of a registered histogram."""
        definition = self._lookup(name, "histogram")
        values = definition.label_values(labels)
        self._record_histogram(definition, value, values)

    # -- helpers shared by subclasses -----------------------------------------------------------------------------------

    def _register(self, definition: _MetricDefinition) -> None:
        if not isinstance(definition.name, str) or not definition.name:
            raise ValueError(f"Invalid metric name {definition.name!r}.")
        with self._registration_lock:
            existing = self._definitions.get(definition.name)
            if existing is not None:
                if existing.kind != definition.kind:
                    raise ValueError(
                        f"Metric '{definition.name}' is already registered as a {_KIND_DISPLAY[existing.kind]}; "
                        f"cannot register it as a {_KIND_DISPLAY[definition.kind]}."
                    )
                if not existing.same_shape(definition):
                    raise ValueError(
                        f"{_KIND_DISPLAY[existing.kind]} '{definition.name}' is already registered with a different "
                        f"definition (labels={list(existing.label_names)}, buckets={existing.buckets}); got "
                        f"labels={list(definition.label_names)}, buckets={definition.buckets}."
                    )
                return
            # The hook may reject the metric (e.g. Prometheus name collisions); only remember it on success.
            self._on_register(definition)
            self._definitions[definition.name] = definition

    def _lookup(self, name: str, kind: MetricKind) -> _MetricDefinition:
        definition = self._definitions.get(name)
        if definition is None:
            raise ValueError(f"{_KIND_DISPLAY[kind]} '{name}' is not registered.")
        if definition.kind != kind:
            raise ValueError(
                f"Metric '{name}' is registered as a {_KIND_DISPLAY[definition.kind]}, not a {_KIND_DISPLAY[kind]}."
            )
        return definition

    # -- hooks ----------------------------------------------------------------------------------------------------------

    def _on_register(self, definition: _MetricDefinition) -> None:
        """Called (under the registration lock) when a new metric is registered. May raise to reject it."""

    def _record_counter(self, definition: _MetricDefinition, amount: float, label_values: Tuple[Any, ...]) -> None:
        """Record a validated counter increment."""

    def _record_histogram(self, definition: _MetricDefinition, value: float, label_values: Tuple[Any, ...]) -> None:
        """Record a validated histogram observation."""


# ---------------------------------------------------------------------------------------------------------------------
# Console backend
# ---------------------------------------------------------------------------------------------------------------------


def _format_duration(seconds: float) -> str:
    """Format a value in seconds with a human unit (``s``, ``ms``, ``µs``, ``ns``) and two decimals."""
    magnitude = abs(seconds)
    if magnitude >= 1.0:
        return f"{seconds:.2f}s"
    if magnitude >= 1e-3:
        return f"{seconds * 1e3:.2f}ms"
    if magnitude >= 1e-6:
        return f"{seconds * 1e6:.2f}µs"
    return f"{seconds * 1e9:.2f}ns"


def _percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of a non-empty sorted sequence."""
    n = len(sorted_values)
    index = max(0, min(n - 1, math.ceil(fraction * n) - 1))
    return sorted_values[index]


def _format_group(name: str, label_key: LabelKey) -> str:
    if not label_key:
        return name
    return name + "{" + ",".join(f"{k}={v}" for k, v in label_key) + "}"


class _CounterState:
    """Sliding-window state of one (counter, label group).

    Increments are coalesced into small time slots (``[slot_start, sum]``) so memory is bounded by
    ``window / resolution`` instead of by the event rate. With an unbounded window only a running total is kept.
    """

    __slots__ = ("first_seen", "slots", "total")

    def __init__(self, now: float) -> None:
        self.first_seen = now
        self.slots: Deque[List[float]] = deque()
        self.total = 0.0


class _HistogramState:
    """Sliding-window state of one (histogram, label group).

    With a bounded window the most recent observations are kept in a bounded deque of ``(timestamp, value)``. With an
    unbounded window a uniform reservoir sample of all observations is kept (``samples`` + ``seen``).
    """

    __slots__ = ("events", "samples", "seen")

    def __init__(self, max_samples: int) -> None:
        self.events: Deque[Tuple[float, float]] = deque(maxlen=max_samples)
        self.samples: List[float] = []
        self.seen = 0


class ConsoleMetricsBackend(MetricsBackend):
    """Metrics backend that aggregates events in memory and periodically logs a summary line.

    Events are kept per ``(metric_name, label_key)`` where ``label_key`` is the tuple of ``(label_name, value)`` pairs
    truncated to the first ``group_level`` labels. The effective group level is the backend-level ``group_level`` when
    given, otherwise the per-metric one; ``None`` or a value ``< 1`` merges all label groups of a metric into one.

    At most once per ``log_interval_seconds`` (checked globally when the next event arrives) one INFO line is logged
    via the module logger, listing every group with data in the window, sorted and joined by two spaces:

    * counters: ``name{k=v,...}=<rate>/s`` -- the sum over the sliding window divided by the window span (time since the
      group was first seen, capped at ``window_seconds``), but at least ``log_interval_seconds``;
    * histograms: ``name{k=v,...}=<p50>,<p95>,<p99>`` with human units (``s``, ``ms``, ``µs``, ``ns``, two decimals).

    Memory is bounded: events older than the window are dropped; counter increments are coalesced into time slots of
    ``window_seconds / COUNTER_SLOTS_PER_WINDOW`` (so a slot may expire up to one slot width early); histograms keep at
    most ``MAX_SAMPLES_PER_KEY`` observations per group (the most recent ones for a bounded window, a uniform reservoir
    sample for an unbounded window). Pass ``window_seconds=None`` (or ``math.inf``) for an unbounded window.

    The percentiles use the nearest-rank method.
    """

    MAX_SAMPLES_PER_KEY: int = 10_000
    """Maximum number of histogram observations kept per (metric, label group)."""

    COUNTER_SLOTS_PER_WINDOW: int = 1_000
    """Resolution of the counter sliding window (number of time slots per window)."""

    DEFAULT_HISTOGRAM_BUCKETS: Tuple[float, ...] = (0.1, 0.2, 0.5, 1.0, 2.0)
    """Buckets recorded for histograms registered without buckets (informational for the console backend)."""

    def __init__(
        self,
        window_seconds: Optional[float] = 60.0,
        log_interval_seconds: float = 10.0,
        group_level: Optional[int] = None,
    ) -> None:
        """Create a console backend.

        Args:
            window_seconds: Length of the sliding window in seconds; ``None`` or ``math.inf`` for an unbounded window.
            log_interval_seconds: Minimum number of seconds between two summary log lines.
            group_level: Backend-wide group level overriding the per-metric group levels.
        """
        super().__init__()
        if window_seconds is not None and (math.isnan(window_seconds) or window_seconds <= 0):
            raise ValueError(f"window_seconds must be positive or None, got {window_seconds}.")
        if math.isnan(log_interval_seconds) or log_interval_seconds < 0:
            raise ValueError(f"log_interval_seconds must be non-negative, got {log_interval_seconds}.")
        self.window_seconds: Optional[float] = (
            None if window_seconds is None or math.isinf(window_seconds) else float(window_seconds)
        )
        self.log_interval_seconds = float(log_interval_seconds)
        self.group_level = group_level
        self._slot_width = 0.0 if self.window_seconds is None else self.window_seconds / self.COUNTER_SLOTS_PER_WINDOW

        self._lock = threading.Lock()
        self._counter_state: Dict[Tuple[str, LabelKey], _CounterState] = {}
        self._hist_state: Dict[Tuple[str, LabelKey], _HistogramState] = {}
        self._group_labels: Dict[str, Tuple[str, ...]] = {}
        self._buckets: Dict[str, Tuple[float, ...]] = {}
        self._rng = random.Random()
        self._last_log_time = time.time()

    # -- hooks ----------------------------------------------------------------------------------------------------------

    def _on_register(self, definition: _MetricDefinition) -> None:
        level = self.group_level if self.group_level is not None else definition.group_level
        if level is None or level < 1:
            self._group_labels[definition.name] = ()
        else:
            self._group_labels[definition.name] = definition.label_names[:level]
        if definition.kind == "histogram":
            self._buckets[definition.name] = definition.buckets or self.DEFAULT_HISTOGRAM_BUCKETS

    def _label_key(self, name: str, label_values: Tuple[Any, ...]) -> LabelKey:
        group_labels = self._group_labels[name]
        if not group_labels:
            return ()
        return tuple(zip(group_labels, label_values, strict=False))

    def _record_counter(self, definition: _MetricDefinition, amount: float, label_values: Tuple[Any, ...]) -> None:
        key = (definition.name, self._label_key(definition.name, label_values))
        now = time.time()
        with self._lock:
            state = self._counter_state.get(key)
            if state is None:
                state = self._counter_state[key] = _CounterState(now)
            if self.window_seconds is None:
                state.total += amount
            else:
                slots = state.slots
                if slots and now - slots[-1][0] < self._slot_width:
                    slots[-1][1] += amount
                else:
                    slots.append([now, amount])
                cutoff = now - self.window_seconds
                while slots and slots[0][0] < cutoff:
                    slots.popleft()
            message = self._maybe_build_log_message(now)
        if message is not None:
            logger.info(message)

    def _record_histogram(self, definition: _MetricDefinition, value: float, label_values: Tuple[Any, ...]) -> None:
        key = (definition.name, self._label_key(definition.name, label_values))
        now = time.time()
        with self._lock:
            state = self._hist_state.get(key)
            if state is None:
                state = self._hist_state[key] = _HistogramState(self.MAX_SAMPLES_PER_KEY)
            if self.window_seconds is None:
                state.seen += 1
                if len(state.samples) < self.MAX_SAMPLES_PER_KEY:
                    state.samples.append(value)
                else:
                    index = self._rng.randrange(state.seen)
                    if index < self.MAX_SAMPLES_PER_KEY:
                        state.samples[index] = value
            else:
                events = state.events
                events.append((now, value))
                cutoff = now - self.window_seconds
                while events and events[0][0] < cutoff:
                    events.popleft()
            message = self._maybe_build_log_message(now)
        if message is not None:
            logger.info(message)

    # -- aggregation ----------------------------------------------------------------------------------------------------

    def _maybe_build_log_message(self, now: float) -> Optional[str]:
        """Decide (under ``self._lock``) whether a summary is due and build it."""
        if now - self._last_log_time < self.log_interval_seconds:
            return None
        self._last_log_time = now
        entries = self._summarize(now)
        if not entries:
            return None
        return "  ".join(sorted(entries))

    def _summarize(self, now: float) -> List[str]:
        """Build the summary entries and drop groups without data in the window (must hold ``self._lock``)."""
        entries: List[str] = []
        window = self.window_seconds
        cutoff = -math.inf if window is None else now - window

        for key in list(self._counter_state):
            state = self._counter_state[key]
            if window is None:
                total = state.total
                span = now - state.first_seen
            else:
                slots = state.slots
                while slots and slots[0][0] < cutoff:
                    slots.popleft()
                if not slots:
                    del self._counter_state[key]
                    continue
                total = sum(slot[1] for slot in slots)
                span = min(window, now - state.first_seen)
            span = max(span, self.log_interval_seconds)
            rate = total / span if span > 0 else 0.0
            entries.append(f"{_format_group(*key)}={rate:.2f}/s")

        for key in list(self._hist_state):
            hist = self._hist_state[key]
            if window is None:
                values = sorted(hist.samples)
            else:
                events = hist.events
                while events and events[0][0] < cutoff:
                    events.popleft()
                values = sorted(value for _, value in events)
            if not values:
                del self._hist_state[key]
                continue
            percentiles = ",".join(_format_duration(_percentile(values, p)) for p in (0.5, 0.95, 0.99))
            entries.append(f"{_format_group(*key)}={percentiles}")

        return entries


# ---------------------------------------------------------------------------------------------------------------------
# Prometheus backend
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class _PrometheusCacheEntry:
    kind: MetricKind
    logical_name: str
    label_names: Tuple[str, ...]
    buckets: Optional[Tuple[float, ...]]
    metric: Any


# Prometheus metric objects created in this process, keyed by (prometheus_client module, prometheus name). They are
# registered in the client's default registry, which rejects duplicates, so re-creating a backend reuses them.
_PROMETHEUS_METRICS: Dict[Tuple[Any, str], _PrometheusCacheEntry] = {}
_PROMETHEUS_METRICS_LOCK = threading.Lock()


def _import_prometheus_client() -> Any:
    from .extras import import_extra

    return import_extra(
        "prometheus_client", extra="prometheus", feature="Prometheus metrics", package="prometheus-client"
    )


def _prometheus_name(name: str) -> str:
    return name.replace(".", "_")


class PrometheusMetricsBackend(MetricsBackend):
    """Metrics backend exporting to ``prometheus_client``.

    Metric names are converted to Prometheus names by replacing ``.`` with ``_`` (``agl.store.total`` becomes
    ``agl_store_total``); two logical names that collide after this normalization raise ``ValueError``. Metrics are
    created in ``prometheus_client``'s default registry (so that multiprocess mode works, see
    :func:`setup_multiprocess_prometheus`); metric objects are cached per process and reused when another backend
    registers the same metric with the same definition.
    """

    def __init__(self) -> None:
        """Create the backend; raises ``ImportError`` when ``prometheus_client`` is not installed."""
        super().__init__()
        self._prometheus_client = _import_prometheus_client()
        self._prometheus_names: Dict[str, str] = {}
        self._metrics: Dict[str, Any] = {}

    def has_prometheus(self) -> bool:
        """Always ``True``."""
        return True

    def _on_register(self, definition: _MetricDefinition) -> None:
        prom_name = _prometheus_name(definition.name)
        other = self._prometheus_names.get(prom_name)
        if other is not None and other != definition.name:
            raise ValueError(
                f"Metric '{definition.name}' collides with '{other}': both map to Prometheus name '{prom_name}'."
            )
        client = self._prometheus_client
        with _PROMETHEUS_METRICS_LOCK:
            cache_key = (client, prom_name)
            entry = _PROMETHEUS_METRICS.get(cache_key)
            if entry is not None:
                if entry.logical_name != definition.name:
                    raise ValueError(
                        f"Metric '{definition.name}' collides with '{entry.logical_name}': both map to Prometheus name "
                        f"'{prom_name}'."
                    )
                if (entry.kind, entry.label_names, entry.buckets) != (
                    definition.kind,
                    definition.label_names,
                    definition.buckets,
                ):
                    raise ValueError(
                        f"Prometheus metric '{prom_name}' already exists in this process with a different definition."
                    )
                metric = entry.metric
            else:
                if definition.kind == "counter":
                    metric = client.Counter(prom_name, f"Counter {definition.name}", labelnames=definition.label_names)
                else:
                    kwargs: Dict[str, Any] = {"labelnames": definition.label_names}
                    if definition.buckets is not None:
                        kwargs["buckets"] = definition.buckets
                    metric = client.Histogram(prom_name, f"Histogram {definition.name}", **kwargs)
                _PROMETHEUS_METRICS[cache_key] = _PrometheusCacheEntry(
                    definition.kind, definition.name, definition.label_names, definition.buckets, metric
                )
        self._prometheus_names[prom_name] = definition.name
        self._metrics[definition.name] = metric

    def _child(self, definition: _MetricDefinition, label_values: Tuple[Any, ...]) -> Any:
        metric = self._metrics[definition.name]
        if not definition.label_names:
            return metric
        return metric.labels(**dict(zip(definition.label_names, label_values, strict=False)))

    def _record_counter(self, definition: _MetricDefinition, amount: float, label_values: Tuple[Any, ...]) -> None:
        self._child(definition, label_values).inc(amount)

    def _record_histogram(self, definition: _MetricDefinition, value: float, label_values: Tuple[Any, ...]) -> None:
        self._child(definition, label_values).observe(value)


# ---------------------------------------------------------------------------------------------------------------------
# Fan-out backend
# ---------------------------------------------------------------------------------------------------------------------


class MultiMetricsBackend(MetricsBackend):
    """Backend forwarding every registration and event to several backends (in order)."""

    def __init__(self, backends: Sequence[MetricsBackend]) -> None:
        """Create the fan-out backend; ``backends`` must be non-empty."""
        super().__init__()
        self.backends: List[MetricsBackend] = list(backends)
        if not self.backends:
            raise ValueError("MultiMetricsBackend requires at least one backend.")

    def has_prometheus(self) -> bool:
        """``True`` if any of the wrapped backends exports to Prometheus."""
        return any(backend.has_prometheus() for backend in self.backends)

    def _on_register(self, definition: _MetricDefinition) -> None:
        for backend in self.backends:
            if definition.kind == "counter":
                backend.register_counter(definition.name, definition.label_names, group_level=definition.group_level)
            else:
                backend.register_histogram(
                    definition.name,
                    definition.label_names,
                    buckets=definition.buckets,
                    group_level=definition.group_level,
                )

    async def inc_counter(self, name: str, amount: float = 1.0, labels: Optional[Mapping[str, Any]] = None) -> None:
        """Validate, then increment the counter on every wrapped backend."""
        await super().inc_counter(name, amount, labels)
        for backend in self.backends:
            await backend.inc_counter(name, amount, labels)

    async def observe_histogram(self, name: str, value: float, labels: Optional[Mapping[str, Any]] = None) -> None:
        """Validate, then record the observation on every wrapped backend."""
        await super().observe_histogram(name, value, labels)
        for backend in self.backends:
            await backend.observe_histogram(name, value, labels)


# ---------------------------------------------------------------------------------------------------------------------
# Prometheus multiprocess helpers
# ---------------------------------------------------------------------------------------------------------------------

_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def setup_multiprocess_prometheus() -> str:
    """Prepare Prometheus multiprocess mode and return the multiprocess directory.

    If ``PROMETHEUS_MULTIPROC_DIR`` is unset, a fresh temporary directory is created and exported. If it is already
    set, a warning reminds that the directory must be wiped between runs (stale files corrupt the aggregated values).
    Must be called before ``prometheus_client`` is first imported in the process (and before forking workers).
    """
    directory = os.environ.get(_MULTIPROC_ENV)
    if directory:
        logger.warning(
            "%s is already set to %s. Make sure the directory is wiped between runs; stale files from previous runs "
            "will corrupt the exported metrics.",
            _MULTIPROC_ENV,
            directory,
        )
        os.makedirs(directory, exist_ok=True)
        return directory
    directory = tempfile.mkdtemp(prefix="rollouthub_prometheus_")
    os.environ[_MULTIPROC_ENV] = directory
    logger.info("Prometheus multiprocess mode enabled; %s=%s", _MULTIPROC_ENV, directory)
    return directory


def get_prometheus_registry() -> Any:
    """Return the registry to expose.

    With ``PROMETHEUS_MULTIPROC_DIR`` set, a fresh ``CollectorRegistry`` aggregating the multiprocess directory via a
    ``MultiProcessCollector``; otherwise ``prometheus_client``'s default ``REGISTRY``.
    """
    client = _import_prometheus_client()
    if os.environ.get(_MULTIPROC_ENV):
        from prometheus_client import multiprocess

        registry = client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return client.REGISTRY


class _AsgiEndpoint:
    """Wraps an ASGI callable so that Starlette's ``Route`` serves it as an app (a plain function would be taken for a
    request handler)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def mount_prometheus(app: Any, path: str, registry: Any) -> None:
    """Serve ``registry`` on a Starlette/FastAPI ``app`` at ``<path>/`` and at ``<path>`` (no redirect: scrapers are
    often configured without the trailing slash)."""
    from prometheus_client import make_asgi_app
    from starlette.routing import Route

    base = "/" + path.strip("/")
    metrics_app = make_asgi_app(registry=registry)
    app.router.routes.append(Route(base, endpoint=_AsgiEndpoint(metrics_app), methods=["GET", "HEAD"]))
    app.mount(base, metrics_app)


def shutdown_metrics(server: Any = None, worker: Any = None, *args: Any, **kwargs: Any) -> None:
    """Gunicorn ``child_exit`` hook: mark the exited worker's PID as dead in the multiprocess directory.

    Does nothing when ``PROMETHEUS_MULTIPROC_DIR`` is unset, when no worker is given, or when ``prometheus_client`` is
    not installed.
    """
    if worker is None or not os.environ.get(_MULTIPROC_ENV):
        return
    pid = getattr(worker, "pid", None)
    if pid is None:
        return
    try:
        from prometheus_client import multiprocess
    except ImportError:
        logger.debug("prometheus_client is not installed; skipping multiprocess cleanup for pid %s.", pid)
        return
    multiprocess.mark_process_dead(pid)
