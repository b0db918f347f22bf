"""Issue 17: the public API of Agent Lightning v0.3 under ``import rollouthub as agl`` paths.

* every public name of the reference (its modules, top-level names and sub-module names) imports from the
  corresponding ``rollouthub`` path;
* every function or method the spec marks ``async`` is a coroutine function (``inspect.iscoroutinefunction``) whose
  signature accepts every call written against the spec's pseudo-signature: the same parameter names, in the same
  order, with the same kinds (positional vs keyword-only) and defaults; extra parameters must be optional.

The ``agentlightning.*`` module paths of the spec map to ``rollouthub.*``. Modules the project deliberately does not
provide are listed in :data:`NOT_PROVIDED` with the reason, and the test checks they are indeed absent.
"""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import warnings
from typing import Any, Callable, Dict, List, Tuple

import pytest

import rollouthub as agl
from rollouthub.store.base import UNSET

# ---------------------------------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------------------------------

STORE_MODULE_NAMES: Dict[str, str] = {  # store public import paths
    "types": "Rollout Attempt AttemptedRollout RolloutConfig RolloutStatus AttemptStatus RolloutMode "
    "EnqueueRolloutRequest TaskInput Worker WorkerStatus PaginatedResult FilterOptions FilterField SortOptions Span "
    "SpanContext TraceStatus Event Link OtelResource Attributes AttributeValue TraceState StatusCode SpanCoreFields "
    "SpanNames SpanAttributeNames SpanLike Resource LLM ProxyLLM PromptTemplate ResourceUnion NamedResources "
    "ResourcesUpdate",
    "store": "LightningStore LightningStoreCapabilities LightningStoreStatistics LightningStoreClient "
    "LightningStoreServer InMemoryLightningStore CollectionBasedLightningStore LightningStoreThreaded",
    "store.base": "UNSET Unset LightningStore LightningStoreCapabilities LightningStoreStatistics is_queuing "
    "is_running is_finished",
    "store.utils": "LATENCY_BUCKETS rollout_status_from_attempt scan_unhealthy_rollouts",
    "store.collection": "AtomicLabels AtomicMode Collection Queue KeyValue FilterOptions SortOptions PaginatedResult "
    "LightningCollections ListBasedCollection DequeBasedQueue DictBasedKeyValue InMemoryLightningCollections",
    "store.collection.base": "AtomicLabels AtomicMode Collection Queue KeyValue FilterOptions SortOptions "
    "PaginatedResult LightningCollections DuplicatedPrimaryKeyError TrackedCollection tracked ensure_numeric "
    "normalize_filter_options merge_must_filters resolve_sort_options resolve_error_type FilterMap",
    "store.collection.memory": "ListBasedCollection DequeBasedQueue DictBasedKeyValue InMemoryLightningCollections "
    "_LoopAwareAsyncLock _ThreadSafeAsyncLock _item_matches_filters",
    "store.collection_based": "CollectionBasedLightningStore tracked healthcheck_before get_current_store_methods "
    "COLLECTION_STORE_PUBLIC_METHODS COLLECTION_STORE_ALL_METHODS time",
    "store.memory": "InMemoryLightningStore estimate_model_size _detect_total_memory_bytes",
    "store.threading": "LightningStoreThreaded",
    "store.client_server": "LightningStoreServer LightningStoreClient API_V1_PREFIX API_AGL_PREFIX API_V1_AGL_PREFIX "
    "Span RolloutRequest EnqueueManyRolloutsRequest DequeueManyRolloutsRequest StartAttemptRequest "
    "QueryRolloutsRequest QueryAttemptsRequest QueryResourcesRequest QuerySpansRequest QueryWorkersRequest "
    "WaitForRolloutsRequest NextSequenceIdRequest NextSequenceIdResponse UpdateRolloutRequest UpdateAttemptRequest "
    "UpdateWorkerRequest",
    "utils.metrics": "MetricsBackend ConsoleMetricsBackend PrometheusMetricsBackend MultiMetricsBackend "
    "setup_multiprocess_prometheus get_prometheus_registry shutdown_metrics",
    "utils.otlp": "handle_otlp_export spans_from_proto LightningStoreOTLPExporter PROTOBUF_CT",
    "utils.server_launcher": "PythonServerLauncher PythonServerLauncherArgs LaunchMode",
    "utils.id": "generate_id",
    "utils.system_snapshot": "system_snapshot",
    "semconv": "LightningResourceAttributes AGL_VIRTUAL",
    "env_var": "LightningEnvVar resolve_bool_env_var resolve_int_env_var resolve_str_env_var",
    "cli": "main",
    "cli.store": "main",
    "cli.prometheus": "main",
}

TOP_LEVEL_NAMES = (  # runtime top-level names (every sub-package's exports, importable from the package itself)
    "TraceAdapter OtelTraceAdapter Adapter TraceToTripletBase TracerTraceToTriplet LlmProxyTraceToTriplet "
    "TraceToMessages Algorithm algo FastAlgorithm Baseline APO VERL lightning_cli reward operation emit_reward "
    "get_reward_value get_rewards_from_span is_reward_span find_reward_spans find_final_reward emit_message "
    "emit_object emit_exception emit_annotation get_message_value get_object_value LightningEnvVar "
    "resolve_bool_env_var resolve_int_env_var resolve_str_env_var ExecutionStrategy ClientServerExecutionStrategy "
    "ExecutionEvent ThreadingEvent MultiprocessingEvent SharedMemoryExecutionStrategy LitAgent llm_rollout "
    "prompt_rollout rollout LLMProxy setup_logging setup_module_logging configure_logger Runner LegacyAgentRunner "
    "LitAgentRunner LightningStore LightningStoreCapabilities LightningStoreStatistics LightningStoreClient "
    "LightningStoreServer InMemoryLightningStore CollectionBasedLightningStore LightningStoreThreaded AgentOpsTracer "
    "Tracer OtelTracer DummyTracer get_active_tracer set_active_tracer clear_active_tracer Trainer build_component "
    "Triplet RolloutLegacy Task TaskInput TaskIfAny RolloutRawResultLegacy RolloutRawResult RolloutMode "
    "GenericResponse ParallelWorkerBase Dataset AttemptStatus RolloutStatus RolloutConfig Rollout Attempt "
    "AttemptedRollout EnqueueRolloutRequest Hook Worker WorkerStatus PaginatedResult FilterOptions SortOptions "
    "FilterField Resource LLM ProxyLLM PromptTemplate ResourceUnion NamedResources ResourcesUpdate AttributeValue "
    "Attributes TraceState SpanContext TraceStatus Event Link OtelResource Span SpanNames SpanAttributeNames SpanLike "
    "StatusCode SpanCoreFields SpanRecordingContext AgentLightningClient DevTaskLoader AgentLightningServer "
    "__version__"
).split()

RUNTIME_SUBMODULE_NAMES: Dict[str, str] = {  # public names that live only in sub-modules
    "utils.otel": "full_qualified_name get_tracer_provider get_tracer make_tag_attributes extract_tags_from_attributes "
    "make_link_attributes query_linked_spans extract_links_from_attributes filter_attributes "
    "filter_and_unflatten_attributes flatten_attributes unflatten_attributes sanitize_attribute_value "
    "sanitize_attributes sanitize_list_attribute_sanity check_attributes_sanity format_exception_attributes "
    "get_span_processors",
    "utils.otlp": "handle_otlp_export spans_from_proto LightningStoreOTLPExporter PROTOBUF_CT",
    "utils.server_launcher": "PythonServerLauncher PythonServerLauncherArgs LaunchMode noop_context ChildEvent",
    "utils.system_snapshot": "system_snapshot",
    "utils.id": "generate_id",
    "instrumentation": "instrument_all uninstrument_all AGENTOPS_INSTALLED AGENTOPS_LANGCHAIN_INSTALLED "
    "LITELLM_INSTALLED VLLM_INSTALLED WEAVE_INSTALLED",
    "instrumentation.agentops": "instrument_agentops uninstrument_agentops enable_agentops_service",
    "instrumentation.litellm": "instrument_litellm uninstrument_litellm",
    "instrumentation.vllm": "instrument_vllm uninstrument_vllm",
    "instrumentation.agentops_langchain": "instrument_agentops_langchain uninstrument_agentops_langchain",
    "tracer.otel": "LightningSpanProcessor OtelSpanRecordingContext",
    "tracer.weave": "WeaveTracer",
    "tracer.dummy": "DummySpanRecordingContext",
    "tracer.base": "with_active_tracer_context",
    "emitter.annotation": "OperationContext",
    "emitter.object": "encode_object",
    "adapter.triplet": "TraceTree Transition RewardMatchPolicy",
    "adapter.messages": "OpenAIMessages group_genai_dict convert_to_openai_messages",
    "litagent.decorator": "FunctionalLitAgent",
    "algorithm.decorator": "FunctionalAlgorithm",
    "algorithm.utils": "batch_iter_over_dataset with_store with_llm_proxy",
    "algorithm.apo": "APO",
    "trainer.init_utils": "build_component instantiate_component instantiate_from_spec load_class OptionalDefaults",
    "trainer.registry": "ExecutionStrategyRegistry",
    "execution.base": "AlgorithmBundle RunnerBundle",
    "execution.inter_process": "InterProcessExecutionStrategy",
    "llm_proxy": "LLMProxy ModelConfig LightningSpanExporter LightningOpenTelemetry AddReturnTokenIds AddLogprobs "
    "RolloutAttemptMiddleware StreamConversionMiddleware MessageInspectionMiddleware get_active_llm_proxy "
    "set_active_llm_proxy initialize_llm_callbacks",
    "reward": "find_final_reward",
    "client": "AgentLightningClient DevTaskLoader",
    "server": "AgentLightningServer",
}

RUNTIME_MODULES = (  # runtime modules and their sub-modules
    "types types.core types.resources types.tracer semconv env_var logging config litagent litagent.litagent "
    "litagent.decorator tracer tracer.base tracer.otel tracer.agentops tracer.dummy tracer.weave instrumentation "
    "instrumentation.agentops instrumentation.agentops_langchain instrumentation.litellm instrumentation.vllm "
    "emitter emitter.annotation emitter.reward emitter.message emitter.object emitter.exception reward adapter "
    "adapter.base adapter.triplet adapter.messages runner runner.base runner.agent runner.legacy algorithm "
    "algorithm.base algorithm.decorator algorithm.fast algorithm.utils algorithm.apo algorithm.verl trainer "
    "trainer.trainer trainer.init_utils trainer.registry execution execution.base execution.events "
    "execution.shared_memory execution.client_server execution.inter_process llm_proxy store utils utils.otel "
    "utils.otlp utils.server_launcher utils.system_snapshot utils.id utils.metrics cli client server"
).split()

NOT_PROVIDED: Dict[str, str] = {
    "store.mongo": "optional MongoDB backend: replaced by the SQL backend (SQLite/PostgreSQL), docs/sql-backend.md",
    "store.collection.mongo": "optional MongoDB collections: replaced by the SQL collections",
    "instrumentation.weave": "optional W&B Weave patches (optional in the reference too)",
    "verl": "GPU-only VERL internals; agl.VERL raises a clear ImportError when used",
    "trainer.legacy": "the legacy trainer loop lives in rollouthub.trainer.trainer (Trainer.fit_v0)",
}


def _module(path: str) -> Any:
    with warnings.catch_warnings():  # the deprecated alias module rollouthub.reward warns when imported
        warnings.simplefilter("ignore", DeprecationWarning)
        return importlib.import_module(f"rollouthub.{path}" if path else "rollouthub")


def _missing(module_path: str, names: str) -> List[str]:
    module = _module(module_path)
    return [name for name in names.split() if not hasattr(module, name)]


@pytest.mark.parametrize("module_path", list(STORE_MODULE_NAMES))
def test_store_spec_public_names(module_path: str) -> None:
    assert _missing(module_path, STORE_MODULE_NAMES[module_path]) == []


@pytest.mark.parametrize("module_path", list(RUNTIME_SUBMODULE_NAMES))
def test_runtime_spec_submodule_names(module_path: str) -> None:
    assert _missing(module_path, RUNTIME_SUBMODULE_NAMES[module_path]) == []


def test_top_level_names_of_import_rollouthub_as_agl() -> None:
    assert [name for name in TOP_LEVEL_NAMES if not hasattr(agl, name)] == []
    assert agl.__version__ == "0.3.0"
    assert agl.rollout is agl.litagent.rollout


def test_agl_reward_is_the_decorator_in_a_fresh_interpreter() -> None:
    # rollouthub never imports the deprecated alias module ``rollouthub.reward`` itself, so
    # ``agl.reward`` stays the decorator (importing the alias module, as this test module does, rebinds it).
    code = (
        "import inspect, sys, rollouthub as agl\n"
        "print(inspect.ismodule(agl.reward), callable(agl.reward), 'rollouthub.reward' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "True", "False"], proc.stderr


@pytest.mark.parametrize("module_path", RUNTIME_MODULES)
def test_runtime_spec_modules_import(module_path: str) -> None:
    assert _module(module_path).__name__ == f"rollouthub.{module_path}"


@pytest.mark.parametrize("module_path", list(NOT_PROVIDED))
def test_modules_not_provided_are_absent(module_path: str) -> None:
    with pytest.raises(ImportError):
        _module(module_path)


def test_client_server_module_references_span_by_module_name() -> None:
    client_server = _module("store.client_server")
    assert client_server.Span is agl.Span  # tests patch rollouthub.store.client_server.Span.from_opentelemetry
    assert (client_server.API_V1_PREFIX, client_server.API_AGL_PREFIX) == ("/v1", "/agl")
    assert client_server.API_V1_AGL_PREFIX == "/v1/agl"


# ---------------------------------------------------------------------------------------------------------------------
# Coroutine functions and their signatures
# ---------------------------------------------------------------------------------------------------------------------

STORE_CONTRACT = """
def start_rollout(input, mode=None, resources_id=None, config=None, metadata=None, worker_id=None): ...
def enqueue_rollout(input, mode=None, resources_id=None, config=None, metadata=None): ...
def enqueue_many_rollouts(rollouts): ...
def dequeue_rollout(worker_id=None): ...
def dequeue_many_rollouts(*, limit=1, worker_id=None): ...
def start_attempt(rollout_id, worker_id=None): ...
def query_rollouts(*, status_in=None, rollout_id_in=None, rollout_id_contains=None, filter_logic="and", sort_by=None,
                   sort_order="asc", limit=-1, offset=0, status=None, rollout_ids=None): ...
def get_rollout_by_id(rollout_id): ...
def query_attempts(rollout_id, *, sort_by="sequence_id", sort_order="asc", limit=-1, offset=0): ...
def get_latest_attempt(rollout_id): ...
def update_rollout(rollout_id, input=UNSET, mode=UNSET, resources_id=UNSET, status=UNSET, config=UNSET,
                   metadata=UNSET): ...
def update_attempt(rollout_id, attempt_id, status=UNSET, worker_id=UNSET, last_heartbeat_time=UNSET,
                   metadata=UNSET): ...
def query_workers(*, status_in=None, worker_id_contains=None, filter_logic="and", sort_by=None, sort_order="asc",
                  limit=-1, offset=0): ...
def get_worker_by_id(worker_id): ...
def update_worker(worker_id, heartbeat_stats=UNSET): ...
def add_resources(resources): ...
def update_resources(resources_id, resources): ...
def query_resources(*, resources_id=None, resources_id_contains=None, sort_by=None, sort_order="asc", limit=-1,
                    offset=0): ...
def get_resources_by_id(resources_id): ...
def get_latest_resources(): ...
def get_next_span_sequence_id(rollout_id, attempt_id): ...
def get_many_span_sequence_ids(rollout_attempt_ids): ...
def add_span(span): ...
def add_many_spans(spans): ...
def add_otel_span(rollout_id, attempt_id, readable_span, sequence_id=None): ...
def query_spans(rollout_id, attempt_id=None, *, trace_id=None, trace_id_contains=None, span_id=None,
                span_id_contains=None, parent_id=None, parent_id_contains=None, name=None, name_contains=None,
                filter_logic="and", limit=-1, offset=0, sort_by="sequence_id", sort_order="asc"): ...
def wait_for_rollouts(*, rollout_ids, timeout=None): ...
def statistics(): ...
"""  # the LightningStore contract (every data method of the contract is async)

COLLECTION_CONTRACT = """
def query(filter=None, sort=None, limit=-1, offset=0): ...
def get(filter=None, sort=None): ...
def insert(items): ...
def update(items, update_fields=None): ...
def upsert(items, update_fields=None): ...
def delete(items): ...
def size(): ...
"""  # Collection
QUEUE_CONTRACT = """
def has(item): ...
def enqueue(items): ...
def dequeue(limit=1): ...
def peek(limit=1): ...
def size(): ...
"""  # Queue
KEY_VALUE_CONTRACT = """
def has(key): ...
def get(key, default=None): ...
def set(key, value): ...
def pop(key, default=None): ...
def size(): ...
def inc(key, amount): ...
def chmax(key, value): ...
"""  # KeyValue
HOOK_CONTRACT = """
def on_rollout_start(*, agent, runner, rollout): ...
def on_trace_start(*, agent, runner, tracer, rollout): ...
def on_trace_end(*, agent, runner, tracer, rollout): ...
def on_rollout_end(*, agent, runner, rollout, spans): ...
"""  # Hook
LITAGENT_CONTRACT = """
def rollout_async(task, resources, rollout): ...
"""  # LitAgent (the training/validation variants take the same arguments)
RUNNER_CONTRACT = """
def iter(*, event=None): ...
def step(input, *, resources=None, mode=None, event=None): ...
"""  # Runner
SERVER_LIFECYCLE = """
def start(): ...
def stop(): ...
"""  # LightningStoreServer, PythonServerLauncher, LLMProxy
STORE_UTILS = """
def rollout_status_from_attempt(attempt, config): ...
def scan_unhealthy_rollouts(rollouts): ...
"""  # status propagation and watchdog scan


def _contract(source: str) -> Dict[str, inspect.Signature]:
    namespace: Dict[str, Any] = {"UNSET": UNSET}
    exec(compile(source, "<spec>", "exec"), namespace)  # noqa: S102 - the spec's pseudo-signatures, as stubs
    return {name: inspect.signature(fn) for name, fn in namespace.items() if inspect.isfunction(fn)}


def _is_self(param: inspect.Parameter) -> bool:
    return param.name in ("self", "cls") and param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


def _parity_problems(actual_fn: Callable[..., Any], expected: inspect.Signature) -> List[str]:
    """Why a call written against ``expected`` could fail on ``actual_fn`` (empty when it cannot)."""
    actual = [p for p in inspect.signature(actual_fn).parameters.values() if not _is_self(p)]
    problems: List[str] = []
    variadic = {p.kind for p in actual} & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    by_name = {p.name: p for p in actual}
    positional = [p for p in actual if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for index, want in enumerate(expected.parameters.values()):
        got = by_name.get(want.name)
        if got is None:
            if not variadic:
                problems.append(f"missing parameter {want.name!r}")
            continue
        if want.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
            if got.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD or positional.index(got) != index:
                problems.append(f"{want.name!r} must be positional-or-keyword at position {index}")
        elif got.kind not in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            problems.append(f"{want.name!r} must be accepted as a keyword")
        if want.default is not inspect.Parameter.empty and got.default != want.default:
            problems.append(f"{want.name!r} defaults to {got.default!r}, the spec says {want.default!r}")
        if want.default is inspect.Parameter.empty and got.default is not inspect.Parameter.empty:
            pass  # an optional parameter where the spec requires one still accepts every spec call
    for got in actual:
        if got.name in expected.parameters or got.kind in (got.VAR_POSITIONAL, got.VAR_KEYWORD):
            continue
        if got.default is inspect.Parameter.empty:
            problems.append(f"extra required parameter {got.name!r}")
    return problems


def _check(owner: Any, contract: str) -> Dict[str, List[str]]:
    failures: Dict[str, List[str]] = {}
    for name, expected in _contract(contract).items():
        fn = getattr(owner, name, None)
        problems = ["missing"] if fn is None else []
        if fn is not None:
            if not inspect.iscoroutinefunction(fn):
                problems.append("not a coroutine function")
            problems += _parity_problems(fn, expected)
        if problems:
            failures[name] = problems
    return failures


def _store_classes() -> List[Tuple[str, Any]]:
    from rollouthub.store.sql import SqlLightningStore

    return [
        ("LightningStore", agl.LightningStore),
        ("CollectionBasedLightningStore", agl.CollectionBasedLightningStore),
        ("InMemoryLightningStore", agl.InMemoryLightningStore),
        ("LightningStoreThreaded", agl.LightningStoreThreaded),
        ("LightningStoreServer", agl.LightningStoreServer),
        ("LightningStoreClient", agl.LightningStoreClient),
        ("SqlLightningStore", SqlLightningStore),
    ]


@pytest.mark.parametrize(("name", "cls"), _store_classes(), ids=[name for name, _ in _store_classes()])
def test_store_methods_are_coroutines_with_the_spec_signatures(name: str, cls: Any) -> None:
    assert _check(cls, STORE_CONTRACT) == {}


def test_store_utils_are_coroutines_with_the_spec_signatures() -> None:
    assert _check(_module("store.utils"), STORE_UTILS) == {}


@pytest.mark.parametrize(
    ("owner", "contract"),
    [
        ("store.collection:Collection", COLLECTION_CONTRACT),
        ("store.collection:ListBasedCollection", COLLECTION_CONTRACT),
        ("store.collection:Queue", QUEUE_CONTRACT),
        ("store.collection:DequeBasedQueue", QUEUE_CONTRACT),
        ("store.collection:KeyValue", KEY_VALUE_CONTRACT),
        ("store.collection:DictBasedKeyValue", KEY_VALUE_CONTRACT),
        (":Hook", HOOK_CONTRACT),
        (":LitAgent", LITAGENT_CONTRACT),
        (":Runner", RUNNER_CONTRACT),
        (":LitAgentRunner", RUNNER_CONTRACT),
        (":LightningStoreServer", SERVER_LIFECYCLE),
        ("utils.server_launcher:PythonServerLauncher", SERVER_LIFECYCLE),
        (":LLMProxy", SERVER_LIFECYCLE),
    ],
)
def test_async_runtime_and_collection_methods(owner: str, contract: str) -> None:
    module_path, attr = owner.split(":")
    assert _check(getattr(_module(module_path), attr), contract) == {}


def test_litagent_training_and_validation_variants_are_coroutines() -> None:
    expected = _contract(LITAGENT_CONTRACT)["rollout_async"]
    for name in ("training_rollout_async", "validation_rollout_async"):
        fn = getattr(agl.LitAgent, name)
        assert inspect.iscoroutinefunction(fn), name
        assert _parity_problems(fn, expected) == [], name


def test_parity_checker_catches_differences() -> None:
    expected = _contract("def f(a, b=1, *, c=None): ...")["f"]

    async def good(self: Any, a: Any, b: Any = 1, *, c: Any = None, extra: Any = 0) -> None: ...
    async def swapped(self: Any, b: Any = 1, a: Any = None, *, c: Any = None) -> None: ...
    async def renamed(self: Any, a: Any, bb: Any = 1, *, c: Any = None) -> None: ...
    async def wrong_default(self: Any, a: Any, b: Any = 2, *, c: Any = None) -> None: ...
    async def new_required(self: Any, a: Any, b: Any = 1, *, c: Any = None, d: Any) -> None: ...

    assert _parity_problems(good, expected) == []
    assert _parity_problems(swapped, expected)
    assert _parity_problems(renamed, expected)
    assert _parity_problems(wrong_default, expected)
    assert _parity_problems(new_required, expected)
