"""The native LLM-proxy engine: a Starlette app forwarding OpenAI-compatible calls with aiohttp.

Routes (each also reachable under ``/rollout/{rollout_id}/attempt/{attempt_id}`` through
:class:`~rollouthub.llm_proxy.middleware.RolloutAttemptMiddleware`):

* ``POST /v1/chat/completions``, ``/chat/completions``, ``/v1/completions``, ``/completions``, ``/v1/responses``,
  ``/responses``, ``/v1/embeddings``, ``/embeddings`` — forwarded to the OpenAI-compatible backend of the
  requested model, or answered by the local policy backend of a ``local/<name>`` deployment (chat completions
  only); ``POST /v1/messages`` (and ``/messages``) — forwarded to ``anthropic/`` deployments;
* ``GET /v1/models``, ``/models``, ``/v1/models/{id}``, ``/models/{id}``;
* ``GET /health`` (cheap; ``?probe=true`` probes every backend's ``/models``), ``/health/liveliness``,
  ``/health/liveness``, ``/health/readiness``.

Upstream errors are passed through with their status; unknown models get HTTP 400 in the OpenAI error shape.
Connection errors and 5xx answers are retried ``num_retries`` times (rotating over the model's deployments).
Calls attributed to a rollout (``x-rollout-id`` / ``x-attempt-id`` / ``x-sequence-id`` headers) are recorded as
spans and written to the store **before** the client receives the end of the response.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
)

import aiohttp
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from .callbacks import LightningOpenTelemetry, LLMProxyCallback
from .local_api import LocalRequestError
from .middleware import ATTEMPT_ID_HEADER, ROLLOUT_ID_HEADER, SEQUENCE_ID_HEADER, is_own_middleware
from .models import Deployment, ModelRouter, ProxySettings
from .parsed_json import REQUEST_BODY, RESPONSE_BODY, parsed_json, remember_json
from .replay import anthropic_stream_events, openai_stream_events
from .spans import CallRecord, record_call_spans
from .streams import SSEParser, stream_accumulator

if TYPE_CHECKING:
    from rollouthub.store.base import LightningStore

    from .local_backend import LocalPolicyBackend
    from .proxy import LLMProxy

__all__ = ["ProxyEngine", "openai_error"]

logger = logging.getLogger(__name__)

OPENAI_ROUTES: Dict[str, str] = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "responses": "/responses",
    "embeddings": "/embeddings",
}
_SENSITIVE_HEADER_WORDS = ("key", "token", "auth", "secret", "cookie")
_RETRY_BACKOFF_SECONDS = 0.1
_MAX_BACKOFF_SECONDS = 2.0


def environment_configures_http() -> bool:
    """Whether the environment sets anything aiohttp's ``trust_env`` would use: an ``http(s)``/``ws(s)`` proxy
    variable or a netrc file (``$NETRC`` or ``~/.netrc``).

    Checked once per upstream session: with ``trust_env=True`` aiohttp re-reads the proxy variables and the netrc
    file on every request (in a worker thread), which cost the proxy about a fifth of its CPU per call.
    """
    proxies = urllib.request.getproxies_environment()
    if any(proxies.get(scheme) for scheme in ("http", "https", "ws", "wss")):
        return True
    netrc_path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    return os.path.isfile(netrc_path)


def openai_error(status: int, message: str, error_type: str = "invalid_request_error", param: Any = None) -> Response:
    """A JSON error response in the OpenAI error shape."""
    return JSONResponse(
        {"error": {"message": message, "type": error_type, "param": param, "code": str(status)}}, status_code=status
    )


@dataclass
class _Upstream:
    """Outcome of forwarding: an open upstream response, a body answered in this process (a ``mock_response`` or
    a local policy backend, with its status and headers), or a transport error."""

    deployment: Deployment
    payload: Dict[str, Any]
    start_ns: int
    policy_version: Optional[int] = None
    response: Optional[aiohttp.ClientResponse] = None
    body: Optional[Dict[str, Any]] = None
    status: int = 200
    headers: Dict[str, str] = field(default_factory=dict)
    error: Optional[BaseException] = None


def _mock_body(kind: str, deployment: Deployment, payload: Dict[str, Any]) -> Dict[str, Any]:
    """The response of a ``mock_response`` deployment (no network), in the format of the route."""
    mock = deployment.mock_response
    if isinstance(mock, dict):
        return dict(mock)
    text = str(mock)
    model = payload.get("model")
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    if kind == "messages":
        return {
            "id": f"msg_mock_{uuid.uuid4().hex[:20]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
    if kind == "completions":
        choice: Dict[str, Any] = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
        return {
            "id": f"cmpl-mock-{uuid.uuid4().hex[:20]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": usage,
        }
    if kind != "chat":
        raise ValueError(f"mock_response is not supported on the {kind} route")
    return {
        "id": f"chatcmpl-mock-{uuid.uuid4().hex[:20]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": usage,
    }


class ProxyEngine:
    """Route, forward and record the calls of one LLM-proxy app.

    Args:
        deployments: the resolved ``model_list``.
        settings: retries, timeout and client authentication.
        callbacks: callback instances (payload hooks; :class:`LightningOpenTelemetry` records spans).
        llm_proxy: the owning proxy (its store receives the spans); ``None`` uses the active proxy.
        local_backends: the local policy backends by name, for ``local/<name>`` deployments.
    """

    def __init__(
        self,
        deployments: Sequence[Deployment],
        settings: ProxySettings,
        callbacks: Sequence[LLMProxyCallback] = (),
        llm_proxy: Optional[LLMProxy] = None,
        local_backends: Optional[Mapping[str, LocalPolicyBackend]] = None,
    ) -> None:
        """Index the deployments; HTTP sessions are created lazily on the serving loop."""
        self.router = ModelRouter(deployments)
        self.local_backends: Mapping[str, LocalPolicyBackend] = local_backends if local_backends is not None else {}
        self.settings = settings
        self.callbacks = list(callbacks)
        self.otel = next((cb for cb in self.callbacks if isinstance(cb, LightningOpenTelemetry)), None)
        self.llm_proxy = llm_proxy
        self._sessions: Dict[str, aiohttp.ClientSession] = {}
        self._session_loop: Optional[asyncio.AbstractEventLoop] = None
        self._background: Set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ sessions

    def _session(self, purpose: str) -> aiohttp.ClientSession:
        """The ``"upstream"`` (honours HTTP(S)_PROXY) or ``"store"`` session of the running loop."""
        loop = asyncio.get_running_loop()
        if self._session_loop is not loop:
            self._sessions = {}  # sessions of another (e.g. pre-fork) loop cannot be used here
            self._session_loop = loop
        session = self._sessions.get(purpose)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=1024)
            trust_env = purpose == "upstream" and environment_configures_http()
            session = aiohttp.ClientSession(connector=connector, trust_env=trust_env)
            self._sessions[purpose] = session
        return session

    async def aclose(self) -> None:
        """Wait for background span writes and close the HTTP sessions."""
        if self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            if not session.closed:
                await session.close()

    # ------------------------------------------------------------------ app

    def build_app(self, middlewares: Sequence[type] = ()) -> Starlette:
        """The Starlette app with every route and ``middlewares`` (added in order; the last is outermost)."""
        routes: List[Route] = []
        for kind, path in OPENAI_ROUTES.items():
            endpoint = self._endpoint(kind)
            routes += [Route("/v1" + path, endpoint, methods=["POST"]), Route(path, endpoint, methods=["POST"])]
        messages = self._endpoint("messages")
        routes += [Route("/v1/messages", messages, methods=["POST"]), Route("/messages", messages, methods=["POST"])]
        for prefix in ("/v1", ""):
            routes.append(Route(prefix + "/models", self._models, methods=["GET"]))
            routes.append(Route(prefix + "/models/{model_id:path}", self._model, methods=["GET"]))
        routes.append(Route("/health", self._health, methods=["GET"]))
        for path in ("/health/liveliness", "/health/liveness"):
            routes.append(Route(path, self._liveness, methods=["GET"]))
        routes.append(Route("/health/readiness", self._readiness, methods=["GET"]))
        app = Starlette(routes=routes)
        for cls in middlewares:
            if is_own_middleware(cls):
                app.add_middleware(cls, llm_proxy=self.llm_proxy)  # type: ignore[arg-type]
            else:
                app.add_middleware(cls)  # type: ignore[arg-type]
        return app

    def _endpoint(self, kind: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await self.handle(request, kind)
            except Exception as exc:  # never answer with a bare 500 page
                logger.exception("LLM proxy failed to handle a %s request.", kind)
                return openai_error(500, f"LLM proxy error: {exc}", "internal_server_error")

        return endpoint

    def _unauthorized(self, request: Request) -> Optional[Response]:
        key = self.settings.master_key
        if not key:
            return None
        authorization = request.headers.get("authorization", "")
        given = authorization[7:] if authorization.lower().startswith("bearer ") else request.headers.get("x-api-key")
        if given == key:
            return None
        return openai_error(401, "Authentication error: invalid or missing proxy API key.", "authentication_error")

    # ------------------------------------------------------------------ informational routes

    async def _models(self, request: Request) -> Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "rollouthub"}
            for name in self.router.model_names()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _model(self, request: Request) -> Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        model_id = request.path_params["model_id"]
        if not self.router.candidates(model_id):
            return openai_error(404, f"The model '{model_id}' does not exist", "invalid_request_error", "model")
        return JSONResponse({"id": model_id, "object": "model", "created": 0, "owned_by": "rollouthub"})

    async def _liveness(self, request: Request) -> Response:
        return PlainTextResponse("I'm alive!")

    async def _readiness(self, request: Request) -> Response:
        return JSONResponse({"status": "healthy", "models": self.router.model_names()})

    async def _health(self, request: Request) -> Response:
        if request.query_params.get("probe", "").lower() not in ("1", "true", "yes"):
            return JSONResponse({"status": "healthy", "models": self.router.model_names()})
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        results = await asyncio.gather(*(self._probe(d) for d in self.router.deployments))
        healthy = [r for r in results if "error" not in r]
        unhealthy = [r for r in results if "error" in r]
        return JSONResponse(
            {
                "healthy_endpoints": healthy,
                "unhealthy_endpoints": unhealthy,
                "healthy_count": len(healthy),
                "unhealthy_count": len(unhealthy),
            }
        )

    async def _probe(self, deployment: Deployment) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"model": deployment.model_name, "api_base": deployment.api_base}
        if deployment.mock_response is not None or deployment.is_local:
            return entry
        try:
            async with self._session("upstream").get(
                deployment.url("/models"), headers=deployment.auth_headers(), timeout=aiohttp.ClientTimeout(total=5.0)
            ) as response:
                if response.status >= 500:
                    entry["error"] = f"HTTP {response.status}"
        except Exception as exc:  # noqa: BLE001
            entry["error"] = repr(exc)
        return entry

    # ------------------------------------------------------------------ forwarding

    def _payload(self, body: Dict[str, Any], kind: str, deployment: Deployment) -> Dict[str, Any]:
        payload = dict(body)
        payload["model"] = deployment.upstream_model_for(str(body["model"]))
        for key, value in {**deployment.default_params, **deployment.extra_body}.items():
            payload.setdefault(key, value)
        for callback in self.callbacks:
            payload = callback.pre_call(payload, kind=kind, deployment=deployment)
        return payload

    async def _forward(self, kind: str, body: Dict[str, Any], candidates: List[Deployment]) -> _Upstream:
        """Send the request upstream, retrying connection errors and 5xx answers."""
        first = candidates[0]
        retries = first.num_retries if first.num_retries is not None else self.settings.num_retries
        path = "/messages" if kind == "messages" else OPENAI_ROUTES[kind]
        outcome: Optional[_Upstream] = None
        for attempt in range(retries + 1):
            deployment = candidates[attempt % len(candidates)]
            payload = self._payload(body, kind, deployment)
            outcome = _Upstream(deployment, payload, time.time_ns(), policy_version=deployment.policy_version)
            if deployment.mock_response is not None:
                outcome.body = _mock_body(kind, deployment, payload)
                return outcome
            if deployment.is_local:
                await self._answer_locally(kind, outcome)
                return outcome
            timeout = deployment.timeout or self.settings.timeout
            headers = {"Content-Type": "application/json", **deployment.auth_headers()}
            try:
                response = await self._session("upstream").post(
                    deployment.url(path),
                    data=json.dumps(payload),
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(
                        total=None, sock_connect=min(timeout or 30.0, 30.0), sock_read=timeout
                    ),
                )
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                outcome.error = exc
                logger.warning(
                    "Upstream %s failed (attempt %d/%d): %r", deployment.url(path), attempt + 1, retries + 1, exc
                )
            else:
                if response.status < 500 or attempt >= retries:
                    outcome.response = response
                    return outcome
                logger.warning(
                    "Upstream %s answered HTTP %d (attempt %d/%d); retrying.",
                    deployment.url(path),
                    response.status,
                    attempt + 1,
                    retries + 1,
                )
                response.release()
            if attempt < retries:
                await asyncio.sleep(min(_RETRY_BACKOFF_SECONDS * 2**attempt, _MAX_BACKOFF_SECONDS))
        assert outcome is not None
        return outcome

    async def _answer_locally(self, kind: str, outcome: _Upstream) -> None:
        """Let the deployment's local policy backend answer (errors become the outcome's status and body)."""
        name = outcome.deployment.upstream_model
        backend = self.local_backends.get(name)
        try:
            if backend is None:
                raise LocalRequestError(
                    500, f"No local backend named {name!r} is registered.", error_type="server_error"
                )
            if kind != "chat":
                raise LocalRequestError(
                    400,
                    f"Model {outcome.deployment.model_name!r} is a local policy backend, which serves chat completions "
                    "only.",
                    param="model",
                )
            answer = await backend.chat_completion(outcome.payload)
        except LocalRequestError as exc:
            outcome.status, outcome.body, outcome.headers = exc.status, exc.body(), exc.headers
        else:
            outcome.body, outcome.policy_version = answer.body, answer.policy_version

    # ------------------------------------------------------------------ request handling

    async def handle(self, request: Request, kind: str) -> Response:
        """Serve one API request of ``kind`` (``chat``, ``completions``, ``responses``, ``embeddings``, ``messages``)."""
        start_ns = time.time_ns()
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        try:
            body = parsed_json(request.scope, REQUEST_BODY, await request.body())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return openai_error(400, "The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return openai_error(400, "'model' is required.", param="model")
        candidates = self.router.candidates(model)
        if not candidates:
            return openai_error(
                400,
                f"Invalid model name passed in model={model}. Call `/v1/models` to view available models.",
                param="model",
            )
        anthropic = kind == "messages"
        candidates = [d for d in candidates if d.is_anthropic == anthropic]
        if not candidates:
            where = "an anthropic/ deployment" if anthropic else "an OpenAI-compatible deployment"
            return openai_error(400, f"Model {model!r} has no {where}; the native engine does not translate formats.")
        headers = {
            key: value
            for key, value in request.headers.items()
            if key.startswith("x-") and not any(word in key for word in _SENSITIVE_HEADER_WORDS)
        }
        attributed = all(h in headers for h in (ROLLOUT_ID_HEADER, ATTEMPT_ID_HEADER, SEQUENCE_ID_HEADER))
        streaming = body.get("stream") is True
        upstream = await self._forward(kind, body, candidates)

        def make_record(status: int, response: Optional[Dict[str, Any]], error: Optional[str]) -> CallRecord:
            return CallRecord(
                kind=kind,
                route=request.url.path,
                requested_model=model,
                deployment=upstream.deployment,
                request=body,
                payload=upstream.payload,
                headers=headers,
                start_ns=start_ns,
                upstream_start_ns=upstream.start_ns,
                end_ns=time.time_ns(),
                status_code=status,
                response=response,
                error=error,
                streaming=streaming,
                policy_version=upstream.policy_version,
            )

        if upstream.body is not None:
            ok = upstream.status // 100 == 2
            if attributed:
                error = None if ok else json.dumps(upstream.body)[:2000]
                await self._record(make_record(upstream.status, upstream.body if ok else None, error))
            if not ok:
                return JSONResponse(upstream.body, status_code=upstream.status, headers=upstream.headers)
            reply = self._replay_response(kind, upstream.body, body if streaming else None)
            if isinstance(reply, JSONResponse):
                remember_json(request.scope, RESPONSE_BODY, bytes(reply.body), upstream.body)
            return reply
        if upstream.response is None:
            exc = upstream.error
            timeout = isinstance(exc, asyncio.TimeoutError)
            message = f"Upstream {'timed out' if timeout else 'connection failed'}: {exc!r}"
            if attributed:
                await self._record(make_record(504 if timeout else 502, None, message))
            return openai_error(504 if timeout else 502, message, "timeout" if timeout else "api_connection_error")
        response = upstream.response
        if streaming and response.status // 100 == 2:
            return self._stream(response, kind, make_record if attributed else None)
        try:
            raw = await response.read()
        finally:
            response.release()
        parsed: Any = None
        try:
            parsed = json.loads(raw)
        except ValueError:
            pass
        else:
            remember_json(request.scope, RESPONSE_BODY, raw, parsed)  # the stream conversion replays it unparsed
        ok = response.status // 100 == 2
        if attributed:
            error = None if ok else raw[:2000].decode("utf-8", "replace")
            await self._record(make_record(response.status, parsed if ok and isinstance(parsed, dict) else None, error))
        if not ok and not isinstance(parsed, dict):
            return openai_error(
                response.status, raw.decode("utf-8", "replace") or response.reason or "", "upstream_error"
            )
        return Response(raw, status_code=response.status, media_type=response.content_type or "application/json")

    @staticmethod
    def _replay_response(kind: str, body: Dict[str, Any], stream_request: Optional[Dict[str, Any]]) -> Response:
        """A body answered in this process, as JSON or — for a ``stream_request`` — replayed as server-sent events."""
        if stream_request is None or kind not in ("chat", "messages"):
            return JSONResponse(body)
        if kind == "messages":
            return StreamingResponse(iter(anthropic_stream_events(body)), media_type="text/event-stream")
        options = stream_request.get("stream_options")
        include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        events = openai_stream_events(body, include_usage=include_usage)
        return StreamingResponse(iter(events), media_type="text/event-stream")

    def _stream(
        self,
        response: aiohttp.ClientResponse,
        kind: str,
        make_record: Optional[Callable[[int, Optional[Dict[str, Any]], Optional[str]], CallRecord]],
    ) -> Response:
        """Pass an upstream event stream through, recording it once complete (the last chunk waits for the store)."""
        parser = SSEParser()
        accumulator = stream_accumulator(kind)

        async def body() -> AsyncIterator[bytes]:
            held: Optional[bytes] = None
            finished = False
            try:
                async for chunk in response.content.iter_any():
                    if make_record is not None:
                        for event in parser.feed(chunk):
                            accumulator.add(event)
                    if held is not None:
                        yield held
                    held = chunk
                finished = True
                if make_record is not None:
                    await self._record(make_record(response.status, accumulator.build(), None))
                if held is not None:
                    yield held
            finally:
                response.release()
                if not finished and make_record is not None:
                    record = make_record(response.status, accumulator.build(), "The stream was interrupted.")
                    task = asyncio.ensure_future(self._record(record))
                    self._background.add(task)
                    task.add_done_callback(self._background.discard)

        return StreamingResponse(
            body(),
            status_code=response.status,
            media_type=response.content_type or "text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # ------------------------------------------------------------------ spans

    def _store(self) -> Optional[LightningStore]:
        return self.llm_proxy.get_store() if self.llm_proxy is not None else None

    async def _record(self, record: CallRecord) -> None:
        """Record the call's spans and write them to the store (errors are logged, never raised)."""
        otel = self.otel
        if otel is None:
            return
        try:
            store = self._store()
            if store is not None and store.capabilities.get("otlp_traces", False):
                # the same spans as the SDK path below, encoded straight into the OTLP body the store receives
                await otel.exporter.export_encoded_async(
                    record.headers, partial(otel.encoder.encode, record), store=store, session=self._session("store")
                )
                return
            spans = record_call_spans(otel.tracer, otel.collector, record)
            await otel.exporter.export_async(spans, store=store, session=self._session("store"))
        except Exception:
            logger.exception("Failed to record the spans of a proxied %s call.", record.kind)
