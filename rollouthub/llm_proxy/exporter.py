"""``LightningSpanExporter``: LLM-proxy spans → the store, one request subtree at a time.

Every span recorded for a proxied request carries ``metadata.requester_custom_headers`` (a Python-literal dict of
the request's ``x-*`` headers), from which the exporter learns the rollout, the attempt and the sequence id that
:class:`~rollouthub.llm_proxy.middleware.RolloutAttemptMiddleware` allocated at request start. All spans of one
request are written under that sequence id:

* stores advertising ``otlp_traces`` get the whole subtree in one OTLP/HTTP request to
  ``store.otlp_traces_endpoint()`` (ids stamped into the span resources; encoded with the OpenTelemetry OTLP
  encoder); a non-2xx answer raises ``RuntimeError``. On the async path writes are group-committed: while one
  request to a store is in flight, the subtrees of other calls wait and then go together in the next request, and
  each caller returns once the request carrying its spans was answered;
* other stores get ``add_many_spans`` with the spans converted by ``Span.from_opentelemetry``.

The synchronous :meth:`LightningSpanExporter.export` (OpenTelemetry ``SpanExporter`` API) runs store calls on a
private event-loop thread (``LightningSpanExporterLoop``, re-created after a fork); the proxy engine uses
:meth:`LightningSpanExporter.export_async` on its own loop instead.
"""

from __future__ import annotations

import ast
import asyncio
import logging
import os
import threading
import urllib.error
import urllib.request
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from rollouthub.env_var import resolve_api_token
from rollouthub.semconv import LightningResourceAttributes
from rollouthub.types import Span
from rollouthub.utils.otlp import encode_otlp_traces

if TYPE_CHECKING:
    import aiohttp

    from rollouthub.store.base import LightningStore

__all__ = ["LightningSpanExporter", "HEADERS_ATTRIBUTE", "MAX_BUFFERED_SPANS"]

logger = logging.getLogger(__name__)

HEADERS_ATTRIBUTE = "metadata.requester_custom_headers"
"""Span attribute holding the request's custom headers (a Python-literal dict string, as LiteLLM records it)."""

MAX_BUFFERED_SPANS = 10_000
"""Spans waiting for their root beyond this number are dropped (oldest first, with a warning)."""

STORE_WRITE_TIMEOUT_SECONDS = 30.0
PROTOBUF_CONTENT_TYPE = "application/x-protobuf"

_Target = Tuple["LightningStore", str, str, int]
_BatchKey = Tuple[asyncio.AbstractEventLoop, str, Optional[str]]  # (loop, OTLP url, Authorization header)


def renew_lock_after_fork(owner: Any, attribute: str) -> None:
    """Give ``owner`` a fresh ``threading.Lock`` in forked children (a lock held by another thread at fork time would
    otherwise stay locked forever in the child, e.g. when a thread-mode proxy serves while an mp proxy forks)."""
    if not hasattr(os, "register_at_fork"):  # pragma: no cover - Windows
        return
    ref = weakref.ref(owner)

    def renew() -> None:
        target = ref()
        if target is not None:
            setattr(target, attribute, threading.Lock())

    os.register_at_fork(after_in_child=renew)


def _span_id(span: ReadableSpan) -> Optional[int]:
    context = span.context
    return context.span_id if context is not None else None


def _parse_headers(value: Any, span_name: str) -> Optional[Dict[str, Any]]:
    if not isinstance(value, str) or not value.strip():
        logger.warning("Span %r has an empty or non-string %s attribute; ignoring it.", span_name, HEADERS_ATTRIBUTE)
        return None
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        logger.warning("Span %r has an unparsable %s attribute; ignoring it.", span_name, HEADERS_ATTRIBUTE)
        return None
    if not isinstance(parsed, dict):
        logger.warning("Span %r: %s is not a dict; ignoring it.", span_name, HEADERS_ATTRIBUTE)
        return None
    return parsed


class LightningSpanExporter(SpanExporter):
    """Write LLM-proxy spans to the store under the rollout, attempt and sequence id of their request.

    Args:
        _store: the store to write to (for tests); by default the store given to :meth:`export_async`, else the
            store of the active LLM proxy.
    """

    def __init__(self, _store: Optional[LightningStore] = None) -> None:
        """Create an exporter with an empty buffer."""
        self._store = _store
        self._buffer: List[ReadableSpan] = []
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[threading.Thread] = None
        self._loop_pid: Optional[int] = None
        self._loop_lock = threading.Lock()
        # OTLP writes waiting for the request in flight to their store (see _flush_otlp), and its flushing task
        self._otlp_pending: Dict[_BatchKey, List[Tuple[bytes, asyncio.Future[None]]]] = {}
        self._otlp_flushers: Dict[_BatchKey, asyncio.Task[None]] = {}
        renew_lock_after_fork(self, "_lock")
        renew_lock_after_fork(self, "_loop_lock")

    # ------------------------------------------------------------------ buffering

    def _pop_subtrees(self) -> List[List[ReadableSpan]]:
        """Under the lock: remove every buffered root with its buffered descendants; others stay buffered."""
        children: Dict[int, List[ReadableSpan]] = {}
        for span in self._buffer:
            if span.parent is not None:
                children.setdefault(span.parent.span_id, []).append(span)
        subtrees: List[List[ReadableSpan]] = []
        taken: set[int] = set()
        for root in self._buffer:
            if root.parent is not None:
                continue
            tree: List[ReadableSpan] = []
            stack = [root]
            while stack:
                span = stack.pop()
                if id(span) in taken:
                    continue
                taken.add(id(span))
                tree.append(span)
                span_id = _span_id(span)
                if span_id is not None:
                    stack.extend(children.get(span_id, ()))
            subtrees.append(tree)
        self._buffer = [span for span in self._buffer if id(span) not in taken]
        if len(self._buffer) > MAX_BUFFERED_SPANS:
            dropped = len(self._buffer) - MAX_BUFFERED_SPANS
            logger.warning("Dropping %d buffered LLM-proxy span(s) whose root span never arrived.", dropped)
            self._buffer = self._buffer[dropped:]
        return subtrees

    def _add_and_pop(self, spans: Sequence[ReadableSpan]) -> List[List[ReadableSpan]]:
        with self._lock:
            self._buffer.extend(spans)
            return self._pop_subtrees()

    @property
    def buffered(self) -> int:
        """Number of spans waiting for their root span."""
        with self._lock:
            return len(self._buffer)

    # ------------------------------------------------------------------ target resolution

    def _default_store(self) -> Optional[LightningStore]:
        if self._store is not None:
            return self._store
        from .proxy import _active_llm_proxy

        proxy = _active_llm_proxy()
        return proxy.get_store() if proxy is not None else None

    def _target(self, subtree: Sequence[ReadableSpan], store: Optional[LightningStore]) -> Optional[_Target]:
        """(store, rollout id, attempt id, sequence id) of a subtree, or ``None`` (logged) when it cannot be placed."""
        store = store if store is not None else self._default_store()
        if store is None:
            logger.warning(
                "No store is available (no active LLM proxy with a store); dropping %d span(s).", len(subtree)
            )
            return None
        headers: Dict[str, Any] = {}
        seen: set[str] = set()  # the spans of one request carry the same headers string: parse it once
        for span in subtree:
            value = (span.attributes or {}).get(HEADERS_ATTRIBUTE)
            if value is None:
                continue
            if isinstance(value, str) and value.strip():
                if value in seen:
                    continue
                seen.add(value)
            parsed = _parse_headers(value, span.name)
            if parsed:
                headers.update(parsed)
        return self._target_from_headers(headers, store)

    @staticmethod
    def _target_from_headers(headers: Mapping[str, Any], store: LightningStore) -> Optional[_Target]:
        """(store, rollout id, attempt id, sequence id) named by a request's ``x-*`` headers, or ``None`` (logged)."""
        if not headers:
            logger.warning("LLM-proxy spans without request headers cannot be attributed to a rollout; dropping them.")
            return None
        rollout_id, attempt_id = headers.get("x-rollout-id"), headers.get("x-attempt-id")
        sequence_id = headers.get("x-sequence-id")
        if not isinstance(rollout_id, str) or not isinstance(attempt_id, str) or not rollout_id or not attempt_id:
            logger.warning("LLM-proxy spans without x-rollout-id / x-attempt-id headers; dropping them.")
            return None
        if not isinstance(sequence_id, str) or not sequence_id.isdigit():
            logger.warning(
                "LLM-proxy spans with a missing or non-decimal x-sequence-id %r; dropping them.", sequence_id
            )
            return None
        return store, rollout_id, attempt_id, int(sequence_id)

    # ------------------------------------------------------------------ encodings

    @staticmethod
    def _otlp_destination(store: LightningStore) -> Tuple[str, Dict[str, str]]:
        """(url, headers) of OTLP/HTTP requests to ``store``."""
        headers = {"Content-Type": PROTOBUF_CONTENT_TYPE}
        token = resolve_api_token(getattr(store, "api_token", None))
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return store.otlp_traces_endpoint(), headers

    @staticmethod
    def _otlp_body(batch: Sequence[Tuple[_Target, Sequence[ReadableSpan]]]) -> bytes:
        """One OTLP/HTTP body carrying every subtree of ``batch``, each stamped with its rollout, attempt and
        sequence id on its encoded resources (the SDK spans are not changed). Serialised requests concatenate into
        one valid request (protobuf appends the ``resource_spans`` of each)."""
        return b"".join(
            encode_otlp_traces(
                subtree,
                {
                    LightningResourceAttributes.ROLLOUT_ID.value: rollout_id,
                    LightningResourceAttributes.ATTEMPT_ID.value: attempt_id,
                    LightningResourceAttributes.SPAN_SEQUENCE_ID.value: sequence_id,
                },
            )
            for (_, rollout_id, attempt_id, sequence_id), subtree in batch
        )

    @classmethod
    def _otlp_request(cls, target: _Target, subtree: Sequence[ReadableSpan]) -> Tuple[str, bytes, Dict[str, str]]:
        """(url, body, headers) of the OTLP/HTTP request carrying ``subtree``."""
        url, headers = cls._otlp_destination(target[0])
        return url, cls._otlp_body([(target, subtree)]), headers

    @staticmethod
    def _store_spans(target: _Target, subtree: Sequence[ReadableSpan]) -> List[Span]:
        _, rollout_id, attempt_id, sequence_id = target
        return [
            Span.from_opentelemetry(span, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id)
            for span in subtree
        ]

    # ------------------------------------------------------------------ async path (the proxy engine)

    async def export_async(
        self,
        spans: Sequence[ReadableSpan],
        *,
        store: Optional[LightningStore] = None,
        session: Optional[aiohttp.ClientSession] = None,
    ) -> SpanExportResult:
        """Buffer ``spans`` and write every complete request subtree on the running loop.

        Args:
            spans: ended spans (any order; subtrees whose root has not arrived stay buffered).
            store: the store to write to (default: the test store, else the active proxy's store).
            session: an aiohttp session for OTLP requests (a temporary one is used otherwise).
        """
        ok = True
        for subtree in self._add_and_pop(spans):
            target = self._target(subtree, store)
            if target is None:
                continue
            try:
                await self._write_async(target, subtree, session)
            except Exception:
                ok = False
                logger.exception("Failed to write %d LLM-proxy span(s) to the store.", len(subtree))
        return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

    async def export_encoded_async(
        self,
        headers: Mapping[str, Any],
        encode: Callable[[str, str, int], bytes],
        *,
        store: LightningStore,
        session: Optional[aiohttp.ClientSession] = None,
    ) -> SpanExportResult:
        """Write the spans of one request, encoded by the caller, to a store that accepts OTLP.

        Args:
            headers: the request's ``x-*`` headers (what the spans' ``metadata.requester_custom_headers`` holds),
                naming the rollout, the attempt and the sequence id.
            encode: ``encode(rollout_id, attempt_id, sequence_id)`` returns the serialised OTLP
                ``ExportTraceServiceRequest`` of the request's spans stamped with those ids.
            store: a store advertising ``otlp_traces``.
            session: an aiohttp session for OTLP requests (a temporary one is used otherwise).

        The write is group-committed with the other writes to the same store, as in :meth:`export_async`.
        """
        target = self._target_from_headers(headers, store)
        if target is None:
            return SpanExportResult.SUCCESS
        try:
            _, rollout_id, attempt_id, sequence_id = target
            await self._write_otlp_async(store, encode(rollout_id, attempt_id, sequence_id), session)
        except Exception:
            logger.exception("Failed to write the spans of an LLM-proxy request to the store.")
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    async def _write_async(
        self, target: _Target, subtree: Sequence[ReadableSpan], session: Optional[aiohttp.ClientSession]
    ) -> None:
        store = target[0]
        if not store.capabilities.get("otlp_traces", False):
            await store.add_many_spans(self._store_spans(target, subtree))
            return
        await self._write_otlp_async(store, self._otlp_body([(target, subtree)]), session)

    async def _write_otlp_async(
        self, store: LightningStore, body: bytes, session: Optional[aiohttp.ClientSession]
    ) -> None:
        """Queue ``body`` (a serialised ``ExportTraceServiceRequest``) for the next group commit to ``store`` and
        wait until the request carrying it was answered."""
        url, headers = self._otlp_destination(store)
        loop = asyncio.get_running_loop()
        key: _BatchKey = (loop, url, headers.get("Authorization"))
        done: asyncio.Future[None] = loop.create_future()
        self._otlp_pending.setdefault(key, []).append((body, done))
        if key not in self._otlp_flushers:
            self._otlp_flushers[key] = loop.create_task(self._flush_otlp(key, headers, session))
        await done

    async def _flush_otlp(
        self, key: _BatchKey, headers: Dict[str, str], session: Optional[aiohttp.ClientSession]
    ) -> None:
        """Group commit: send every pending body of ``key`` in one OTLP request (serialised requests concatenate
        into one: their repeated ``resource_spans`` merge), again while more arrived during
        the request, then stop. Each writer is released (or gets the error) when the request carrying its spans
        has been answered, so a call's spans are still stored before its response ends."""
        import aiohttp

        url = key[1]
        own = session is None
        http = session if session is not None else aiohttp.ClientSession()
        try:
            while True:
                batch = self._otlp_pending.pop(key, [])
                if not batch:
                    return
                try:
                    body = b"".join(part for part, _ in batch)
                    async with http.post(
                        url,
                        data=body,
                        headers=headers,
                        timeout=aiohttp.ClientTimeout(total=STORE_WRITE_TIMEOUT_SECONDS),
                    ) as response:
                        if response.status // 100 != 2:
                            text = await response.text()
                            raise RuntimeError(f"OTLP export to {url} failed with HTTP {response.status}: {text[:500]}")
                except asyncio.CancelledError:
                    for _, done in batch:
                        done.cancel()
                    raise
                except Exception as exc:
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
        finally:
            self._otlp_flushers.pop(key, None)
            for _, done in self._otlp_pending.pop(key, []):  # only when cancelled: writers arrived meanwhile
                done.cancel()
            if own:
                await http.close()

    # ------------------------------------------------------------------ sync path (SpanExporter API)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Buffer ``spans`` and write every complete subtree; FAILURE if a write raised."""
        try:
            for subtree in self._add_and_pop(spans):
                target = self._target(subtree, None)
                if target is not None:
                    self._write_sync(target, subtree)
        except Exception:
            logger.exception("Failed to export LLM-proxy spans to the store.")
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _write_sync(self, target: _Target, subtree: Sequence[ReadableSpan]) -> None:
        store = target[0]
        if store.capabilities.get("otlp_traces", False):
            url, body, headers = self._otlp_request(target, subtree)
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=STORE_WRITE_TIMEOUT_SECONDS) as response:  # noqa: S310
                    status = int(response.status)
            except urllib.error.HTTPError as exc:
                status = int(exc.code)
            if status // 100 != 2:
                raise RuntimeError(f"OTLP export to {url} failed with HTTP {status}")
            return
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(store.add_many_spans(self._store_spans(target, subtree)), loop)
        future.result(timeout=STORE_WRITE_TIMEOUT_SECONDS)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        """The private loop (``LightningSpanExporterLoop`` thread), created lazily and again after a fork."""
        with self._loop_lock:
            alive = self._loop_thread is not None and self._loop_thread.is_alive()
            if self._loop is not None and alive and self._loop_pid == os.getpid():
                return self._loop
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                ready.set()
                loop.run_forever()
                loop.close()

            thread = threading.Thread(target=run, name="LightningSpanExporterLoop", daemon=True)
            thread.start()
            ready.wait(5.0)
            self._loop, self._loop_thread, self._loop_pid = loop, thread, os.getpid()
            return loop

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Writes are synchronous: nothing to flush (spans still waiting for their root stay buffered)."""
        return True

    def shutdown(self) -> None:
        """Stop the private loop (if this process started it)."""
        with self._loop_lock:
            loop, thread, pid = self._loop, self._loop_thread, self._loop_pid
            self._loop = self._loop_thread = None
        if loop is not None and pid == os.getpid() and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None and thread is not threading.current_thread():
                thread.join(5.0)
