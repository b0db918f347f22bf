"""``LocalPolicyBackend``: a transformers causal LM served by the LLM proxy in its own process.

The proxy routes a ``model_list`` entry ``{"model_name": "policy", "litellm_params": {"model": "local/policy"}}`` to
the backend registered as ``LLMProxy(local_backends={"policy": backend})``; the proxy must run in this process
(``launch_mode="thread"`` or ``"asyncio"``) so that the backend it serves is the one whose weights the algorithm
updates. Calls are traced like calls to vLLM behind the proxy: the answer has vLLM's OpenAI-compatible shape
(token ids, log-probs) and every span records :attr:`LocalPolicyBackend.policy_version`.

Concurrency: requests are queued to one worker thread that owns the model. It collects the requests arriving within
``batch_window_s`` of the first (up to ``max_batch_size`` sequences) and generates them together
(:mod:`rollouthub.llm_proxy.local_decode`), so the proxy's event loop keeps serving while the model runs.

Weights: ``async with backend.weight_update():`` refuses new calls with HTTP 429 and ``Retry-After`` (OpenAI SDK
clients retry them), waits for the calls in flight, lets the block change the weights
(:meth:`~LocalPolicyBackend.load_state_dict`, :meth:`~LocalPolicyBackend.set_model`, or an optimizer step on the
served model), bumps the policy version when the block succeeds and serves again. :meth:`update_weights` does all of
that in one call. See ``docs/llm-proxy.md`` ("A local policy behind the proxy").
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import math
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Deque, Dict, FrozenSet, Iterator, List, Mapping, Optional

from rollouthub.utils.extras import import_extra

from .local_api import ChatRequest, LocalRequestError, chat_completion_body, parse_chat_request
from .local_decode import BatchDecoder, DecodeRow

__all__ = ["LocalPolicyBackend", "LocalAnswer", "BackendStats"]

logger = logging.getLogger(__name__)

_STOP = object()
"""Queued by :meth:`LocalPolicyBackend.close` to end the worker thread."""


@dataclass
class LocalAnswer:
    """A chat completion produced by the backend and the policy version that produced it."""

    body: Dict[str, Any]
    policy_version: int


@dataclass(frozen=True)
class BackendStats:
    """Counters of a backend since it was created.

    ``requests`` counts the calls admitted, ``refused`` those answered 429 during weight updates; ``batch_sizes``
    maps a batch size (sequences generated together) to how many batches had it; ``generation_seconds`` is the time
    the worker spent generating batches (wall clock, summed).
    """

    requests: int
    refused: int
    batches: int
    sequences: int
    generated_tokens: int
    batch_sizes: Dict[int, int]
    generation_seconds: float = 0.0

    @property
    def max_batch_size(self) -> int:
        """The largest batch generated so far (0 before the first)."""
        return max(self.batch_sizes, default=0)


@dataclass
class _Job:
    request: ChatRequest
    future: concurrent.futures.Future  # type: ignore[type-arg]
    prompt_ids: List[int] = field(default_factory=list)
    max_tokens: int = 0
    prepared: bool = False


def _eos_ids(model: Any, tokenizer: Any) -> FrozenSet[int]:
    ids = set()
    for value in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(v for v in value if isinstance(v, int))
    return frozenset(ids)


class LocalPolicyBackend:
    """Serve a transformers causal LM (and its tokenizer) through the LLM proxy, batching concurrent requests.

    Args:
        model: a causal LM (``transformers`` ``PreTrainedModel`` or a model wrapping one, e.g. peft), on the device
            it should run on. It is served as it is: put it in eval mode; float32 keeps served log-probs within 1e-4
            of a teacher-forced recomputation.
        tokenizer: its tokenizer, with a chat template (rendered with ``add_generation_prompt=True``).
        max_batch_size: the most sequences generated together (also the largest ``n`` a request may ask for).
        batch_window_s: how long the first queued request waits for others to join its batch.
        max_tokens: the answer length when a request gives no ``max_tokens`` / ``max_completion_tokens`` (bounded by
            the model's ``max_position_embeddings``).
        retry_after_s: the ``Retry-After`` sent with HTTP 429 while weights change.
        seed: seeds the generators of requests without a ``seed`` (``None``: a random start).
        policy_version: the version of the weights served at first.

    Raises:
        MissingExtraError: without the ``[train]`` extra (torch, transformers).
        ValueError: on invalid options or a tokenizer without a chat template or end-of-sequence token.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 8,
        batch_window_s: float = 0.01,
        max_tokens: int = 256,
        retry_after_s: float = 1.0,
        seed: Optional[int] = None,
        policy_version: int = 0,
    ) -> None:
        """Check the options; the worker thread starts with the first request."""
        self._torch = import_extra("torch", extra="train", feature="LocalPolicyBackend")
        import_extra("transformers", extra="train", feature="LocalPolicyBackend")
        for name, value, minimum in (("max_batch_size", max_batch_size, 1), ("max_tokens", max_tokens, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"LocalPolicyBackend: {name} must be an integer >= {minimum}, got {value!r}")
        for name, number in (("batch_window_s", batch_window_s), ("retry_after_s", retry_after_s)):
            if not isinstance(number, (int, float)) or not math.isfinite(number) or number < 0:
                raise ValueError(f"LocalPolicyBackend: {name} must be a number >= 0, got {number!r}")
        if isinstance(policy_version, bool) or not isinstance(policy_version, int) or policy_version < 0:
            raise ValueError(f"LocalPolicyBackend: policy_version must be an integer >= 0, got {policy_version!r}")
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("LocalPolicyBackend: the tokenizer has no chat template (set tokenizer.chat_template)")
        eos = _eos_ids(model, tokenizer)
        if not eos:
            raise ValueError("LocalPolicyBackend: neither the tokenizer nor the model names an end-of-sequence token")
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
        self.max_batch_size = max_batch_size
        self.batch_window_s = float(batch_window_s)
        self.max_tokens = max_tokens
        self.retry_after_s = float(retry_after_s)
        self._model = model
        self._tokenizer = tokenizer
        self._decoder = BatchDecoder(self._torch, tokenizer, eos, pad)
        self._rng = random.Random(seed)
        self._state = threading.Condition()
        self._version = policy_version
        self._held = False  # new calls are refused (429)
        self._updating = False  # held and idle: weights may change now
        self._in_flight = 0
        self._closed = False
        self._queue: queue.Queue[Any] = queue.Queue()
        self._worker: Optional[threading.Thread] = None
        self._counts: Dict[str, int] = {
            "requests": 0,
            "refused": 0,
            "batches": 0,
            "sequences": 0,
            "generated_tokens": 0,
        }
        self._batch_sizes: Dict[int, int] = collections.Counter()
        self._generation_seconds = 0.0

    @classmethod
    def from_pretrained(
        cls, path: str, *, device: Optional[str] = None, dtype: Optional[str] = None, **options: Any
    ) -> LocalPolicyBackend:
        """Load a local Hugging Face checkpoint (model and tokenizer from ``path``, no download) and serve it.

        ``device`` e.g. ``"cuda"`` (default: CPU); ``dtype`` a torch dtype name such as ``"bfloat16"`` (default:
        float32); ``options`` go to the constructor.
        """
        torch = import_extra("torch", extra="train", feature="LocalPolicyBackend")
        transformers = import_extra("transformers", extra="train", feature="LocalPolicyBackend")
        torch_dtype = getattr(torch, dtype or "float32", None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ValueError(f"LocalPolicyBackend.from_pretrained: unknown dtype {dtype!r} (e.g. 'bfloat16')")
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        return cls(model.to(device=device or "cpu", dtype=torch_dtype).eval(), tokenizer, **options)

    def __repr__(self) -> str:
        return f"<LocalPolicyBackend policy_version={self._version} max_batch_size={self.max_batch_size}>"

    # ------------------------------------------------------------------ state

    @property
    def model(self) -> Any:
        """The model being served."""
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The tokenizer of the served model."""
        return self._tokenizer

    @property
    def policy_version(self) -> int:
        """The version of the weights being served (bumped by every successful weight update)."""
        with self._state:
            return self._version

    @property
    def calls_in_flight(self) -> int:
        """Calls admitted and not answered yet."""
        with self._state:
            return self._in_flight

    @property
    def holding(self) -> bool:
        """Whether new calls are refused with HTTP 429 (a weight update is waiting or running)."""
        with self._state:
            return self._held

    def stats(self) -> BackendStats:
        """A snapshot of the request, batch and token counters."""
        with self._state:
            return BackendStats(
                batch_sizes=dict(self._batch_sizes), generation_seconds=self._generation_seconds, **self._counts
            )

    # ------------------------------------------------------------------ serving

    async def chat_completion(self, payload: Mapping[str, Any]) -> LocalAnswer:
        """Answer one chat-completion body with the policy being served.

        Raises :class:`~rollouthub.llm_proxy.local_api.LocalRequestError`: 400 for a request the backend does not
        serve (naming the field), 429 while weights change, 503 once closed.
        """
        request = parse_chat_request(payload, max_n=self.max_batch_size)
        job = _Job(request, concurrent.futures.Future())
        with self._state:
            if self._closed:
                raise LocalRequestError(503, "The local policy backend is closed.", error_type="service_unavailable")
            if self._held:
                self._counts["refused"] += 1
                raise LocalRequestError(
                    429,
                    f"The policy's weights are being updated; retry in {self.retry_after_s:g} s.",
                    error_type="rate_limit_error",
                    headers={
                        "Retry-After": str(max(1, math.ceil(self.retry_after_s))),
                        "retry-after-ms": str(int(self.retry_after_s * 1000)),
                    },
                )
            self._in_flight += 1
            self._counts["requests"] += 1
            version = self._version
            self._ensure_worker()
        job.future.add_done_callback(self._job_done)
        self._queue.put(job)
        body = await asyncio.wrap_future(job.future)
        return LocalAnswer(body=body, policy_version=version)

    def _ensure_worker(self) -> None:
        """Start the worker thread on first use (call with the state lock held)."""
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._serve, name="rollouthub-local-policy", daemon=True)
            self._worker.start()

    def _job_done(self, future: concurrent.futures.Future) -> None:  # type: ignore[type-arg]
        with self._state:
            self._in_flight -= 1
            self._state.notify_all()

    def _serve(self) -> None:
        """The worker: collect a batch, generate it, answer its jobs; until :meth:`close`."""
        carried: Deque[_Job] = collections.deque()
        while True:
            first = carried.popleft() if carried else self._queue.get()
            if first is _STOP:
                break
            batch: List[_Job] = []
            try:
                stopping = self._collect(first, batch, carried)
                if batch:
                    self._run(batch)
            except Exception as exc:  # noqa: BLE001 - a bug must not leave callers waiting forever
                logger.exception("The local policy backend's worker failed.")
                error = LocalRequestError(500, f"The local policy backend failed: {exc!r}", error_type="server_error")
                for job in [first, *batch]:
                    if isinstance(job, _Job) and not job.future.done():
                        job.future.set_exception(error)
                stopping = False
            if stopping:
                break
        self._fail_queued(carried)

    def _collect(self, first: Any, batch: List[_Job], carried: Deque[_Job]) -> bool:
        """Fill ``batch`` from ``first`` and the jobs queued within the batch window; a job that does not fit goes
        to ``carried``. True when :meth:`close` asked the worker to stop."""
        size = 0
        deadline = time.monotonic() + self.batch_window_s
        job: Any = first
        while True:
            if job is _STOP:
                return True
            if self._prepare(job):
                if batch and size + job.request.sampling.n > self.max_batch_size:
                    carried.append(job)
                    return False
                batch.append(job)
                size += job.request.sampling.n
            if size >= self.max_batch_size:
                return False
            job = self._next_job(carried, deadline)
            if job is None:
                return False

    def _next_job(self, carried: Deque[_Job], deadline: float) -> Any:
        """The next queued job before ``deadline`` (jobs already queued are taken even after it), else ``None``."""
        if carried:
            return carried.popleft()
        try:
            remaining = deadline - time.monotonic()
            return self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None

    def _prepare(self, job: _Job) -> bool:
        """Take the job (False when its caller gave up), render and tokenize the prompt and fix the token budget;
        a bad request fails alone (False). A job carried over to the next batch is prepared already."""
        if job.prepared:
            return True
        if not job.future.set_running_or_notify_cancel():
            return False
        request = job.request
        try:
            text = self._tokenizer.apply_chat_template(
                request.messages,
                tools=request.tools,
                add_generation_prompt=True,
                tokenize=False,
                **request.chat_template_kwargs,
            )
            job.prompt_ids = list(self._tokenizer.encode(text, add_special_tokens=False))
            job.max_tokens = self._token_budget(request, len(job.prompt_ids))
            job.prepared = True
        except LocalRequestError as exc:
            job.future.set_exception(exc)
            return False
        except Exception as exc:  # noqa: BLE001 - e.g. the chat template rejects the conversation
            job.future.set_exception(LocalRequestError(400, f"'messages' cannot be rendered: {exc}", param="messages"))
            return False
        return True

    def _token_budget(self, request: ChatRequest, prompt_length: int) -> int:
        context = getattr(getattr(self._model, "config", None), "max_position_embeddings", None)
        room = context - prompt_length if isinstance(context, int) else None
        if room is not None and room < 1:
            raise LocalRequestError(
                400,
                f"'messages' render to {prompt_length} tokens; the model's context holds {context}.",
                param="messages",
            )
        wanted = request.sampling.max_tokens
        if wanted is None:
            return self.max_tokens if room is None else min(self.max_tokens, room)
        if room is not None and wanted > room:
            raise LocalRequestError(
                400,
                f"'max_tokens' ({wanted}) + the prompt's {prompt_length} tokens exceed the model's context ({context}).",
                param="max_tokens",
            )
        return wanted

    def _generator(self, request: ChatRequest, device: Any) -> Any:
        seed = request.sampling.seed if request.sampling.seed is not None else self._rng.getrandbits(63)
        return self._torch.Generator(device=device).manual_seed(seed)

    def _run(self, batch: List[_Job]) -> None:
        """Generate one batch and answer its jobs (a failure fails them all with HTTP 500)."""
        rows: List[DecodeRow] = []
        for group, job in enumerate(batch):
            for _ in range(job.request.sampling.n):
                rows.append(DecodeRow(job.prompt_ids, job.request.sampling, job.max_tokens, group))
        started = time.perf_counter()
        try:
            model = self._model
            device = next(model.parameters()).device
            generators = [self._generator(job.request, device) for job in batch]
            outputs = self._decoder.generate(model, rows, generators)
            bodies = []
            for group, job in enumerate(batch):
                mine = [output for row, output in zip(rows, outputs, strict=True) if row.group == group]
                bodies.append(
                    chat_completion_body(
                        job.request,
                        model=job.request.model,
                        prompt_ids=job.prompt_ids,
                        outputs=mine,
                        token_text=self._token_text,
                    )
                )
        except Exception as exc:  # noqa: BLE001 - answer every waiting call rather than leave it hanging
            logger.exception("The local policy backend failed to generate a batch of %d sequences.", len(rows))
            error = LocalRequestError(500, f"The local policy backend failed: {exc!r}", error_type="server_error")
            for job in batch:
                job.future.set_exception(error)
            return
        with self._state:
            self._counts["batches"] += 1
            self._counts["sequences"] += len(rows)
            self._counts["generated_tokens"] += sum(len(output.token_ids) for output in outputs)
            self._batch_sizes[len(rows)] += 1
            self._generation_seconds += time.perf_counter() - started
        for job, body in zip(batch, bodies, strict=True):
            job.future.set_result(body)

    def _token_text(self, token_id: int) -> str:
        return str(self._tokenizer.decode([token_id], skip_special_tokens=False))

    def _fail_queued(self, carried: Deque[_Job]) -> None:
        closed = LocalRequestError(503, "The local policy backend is closed.", error_type="service_unavailable")
        pending = list(carried)
        while True:
            try:
                pending.append(self._queue.get_nowait())
            except queue.Empty:
                break
        for job in pending:
            if job is not _STOP and not job.future.done():
                job.future.set_exception(closed)

    def close(self, timeout: Optional[float] = 30.0) -> None:
        """Refuse new calls (503), finish the batch being generated, fail the queued ones and stop the worker."""
        with self._state:
            self._closed = True
            worker = self._worker
        self._queue.put(_STOP)
        if worker is not None:
            worker.join(timeout)

    # ------------------------------------------------------------------ weights

    @contextlib.asynccontextmanager
    async def weight_update(self, timeout: Optional[float] = None) -> AsyncIterator[LocalPolicyBackend]:
        """Hold new calls (HTTP 429 + ``Retry-After``), wait for the calls in flight, then run the block.

        In the block, change the weights (:meth:`load_state_dict`, :meth:`set_model`, or train the served model in
        place). When the block succeeds the policy version goes up by one; either way calls are served again.
        ``TimeoutError`` when calls are still in flight after ``timeout`` seconds (nothing changed, hold released);
        ``RuntimeError`` when another update is in progress.
        """
        with self._state:
            if self._held:
                raise RuntimeError("LocalPolicyBackend: another weight update is in progress")
            self._held = True
        try:
            idle = await asyncio.to_thread(self._wait_idle, timeout)
            if not idle:
                raise TimeoutError(
                    f"LocalPolicyBackend: {self.calls_in_flight} calls still in flight after {timeout} s; "
                    "weights unchanged"
                )
            with self._state:
                self._updating = True
            yield self
            with self._state:
                self._version += 1
        finally:
            with self._state:
                self._held = self._updating = False
                self._state.notify_all()

    def _wait_idle(self, timeout: Optional[float]) -> bool:
        with self._state:
            return self._state.wait_for(lambda: self._in_flight == 0, timeout)

    async def update_weights(
        self, state_dict: Optional[Mapping[str, Any]] = None, *, model: Any = None, timeout: Optional[float] = None
    ) -> int:
        """Hold calls, load ``state_dict`` into the served model (or serve ``model`` instead), release; returns the
        new policy version. Exactly one of ``state_dict`` and ``model``."""
        if (state_dict is None) == (model is None):
            raise ValueError("update_weights needs exactly one of state_dict and model")
        async with self.weight_update(timeout):
            if state_dict is not None:
                self.load_state_dict(state_dict)
            else:
                self.set_model(model)
        return self.policy_version

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Inside :meth:`weight_update`: nothing to do. Outside: only when no call is in flight; holds calls for the
        duration and bumps the version on success."""
        with self._state:
            if self._updating:
                own = False
            elif self._held:
                raise RuntimeError(
                    "LocalPolicyBackend: a weight update is waiting for calls in flight; change weights in its block"
                )
            elif self._in_flight:
                raise RuntimeError(
                    f"LocalPolicyBackend: {self._in_flight} calls are in flight; use `async with "
                    "backend.weight_update():` to hold new calls and wait for them"
                )
            else:
                own = self._held = self._updating = True
        try:
            yield
            if own:
                with self._state:
                    self._version += 1
        finally:
            if own:
                with self._state:
                    self._held = self._updating = False
                    self._state.notify_all()

    def load_state_dict(self, state_dict: Mapping[str, Any], *, strict: bool = True) -> None:
        """Copy ``state_dict`` into the served model's parameters (any device; converted on copy).

        Every key and shape is checked before anything is copied (``ValueError`` naming the first problem; the
        weights are then unchanged). ``strict=False`` allows a partial state (e.g. adapter weights only); unknown
        keys are always an error. Call it inside :meth:`weight_update`, or outside when no call is in flight (then
        it holds calls while copying and bumps the policy version itself).
        """
        with self._exclusive():
            expected = self._model.state_dict()
            unknown = [key for key in state_dict if key not in expected]
            missing = [key for key in expected if key not in state_dict] if strict else []
            if unknown or missing:
                what = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
                raise ValueError(
                    f"LocalPolicyBackend.load_state_dict: {what} ({len(unknown)} unknown, {len(missing)} missing)"
                )
            for key, value in state_dict.items():
                if tuple(value.shape) != tuple(expected[key].shape):
                    raise ValueError(
                        f"LocalPolicyBackend.load_state_dict: {key!r} has shape {tuple(value.shape)}, the model's is "
                        f"{tuple(expected[key].shape)}"
                    )
            self._model.load_state_dict(dict(state_dict), strict=strict)

    def set_model(self, model: Any) -> None:
        """Serve ``model`` (same tokenizer) instead of the current one; same rules as :meth:`load_state_dict`."""
        if not callable(getattr(model, "parameters", None)):
            raise ValueError(f"LocalPolicyBackend.set_model: expected a torch model, got {type(model).__name__}")
        with self._exclusive():
            self._model = model
