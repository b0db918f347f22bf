"""LLMProxy configuration: validation, aliases, model list, resources, capability checks."""

from __future__ import annotations

import logging
from typing import Any, List

import pytest

import rollouthub as agl
from rollouthub.llm_proxy import (
    AddLogprobs,
    AddReturnTokenIds,
    LightningOpenTelemetry,
    LLMProxy,
    LLMProxyCallback,
    MessageInspectionMiddleware,
    RolloutAttemptMiddleware,
    StreamConversionMiddleware,
    get_active_llm_proxy,
    initialize_llm_callbacks,
    set_active_llm_proxy,
)
from rollouthub.llm_proxy import callbacks as callbacks_module
from rollouthub.llm_proxy.models import ModelRouter, parse_deployment, resolve_proxy_settings
from rollouthub.store.base import LightningStore, LightningStoreCapabilities
from rollouthub.store.memory import InMemoryLightningStore
from rollouthub.store.threading import LightningStoreThreaded
from rollouthub.utils.server_launcher import PythonServerLauncherArgs

ENTRY: Any = {"model_name": "m", "litellm_params": {"model": "hosted_vllm/q", "api_base": "http://h:1/v1"}}


def test_top_level_export_and_module_names() -> None:
    assert agl.LLMProxy is LLMProxy
    import rollouthub.llm_proxy as module

    for name in (
        "ModelConfig",
        "LightningSpanExporter",
        "LightningOpenTelemetry",
        "AddReturnTokenIds",
        "AddLogprobs",
        "RolloutAttemptMiddleware",
        "StreamConversionMiddleware",
        "MessageInspectionMiddleware",
        "get_active_llm_proxy",
        "set_active_llm_proxy",
        "initialize_llm_callbacks",
    ):
        assert hasattr(module, name), name


def test_binds_loopback_by_default(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 18 (point 8): like the store, the proxy binds 127.0.0.1 unless asked for another interface."""
    caplog.set_level(logging.WARNING)
    proxy = LLMProxy(model_list=[ENTRY])
    assert proxy.launcher_args.host == "127.0.0.1"
    assert proxy.server_launcher.endpoint.startswith("http://127.0.0.1:")
    assert "0.0.0.0" not in caplog.text
    assert LLMProxy(model_list=[ENTRY], host="0.0.0.0").launcher_args.host == "0.0.0.0"


def test_defaults_and_launcher_args() -> None:
    proxy = LLMProxy(host="127.0.0.1", model_list=[ENTRY])
    args = proxy.launcher_args
    assert (args.launch_mode, args.n_workers, args.healthcheck_url, args.startup_timeout) == ("mp", 1, "/health", 60.0)
    assert args.port == proxy.server_launcher.port  # a free port was picked and is kept for restarts
    assert proxy.middlewares == [RolloutAttemptMiddleware, StreamConversionMiddleware]
    assert proxy.callbacks == [AddReturnTokenIds, LightningOpenTelemetry]
    assert proxy.litellm_config == {"litellm_settings": {"num_retries": 0}}
    assert proxy.get_store() is None and not proxy.is_running()
    custom = PythonServerLauncherArgs(port=1234, host="127.0.0.1", launch_mode="thread", healthcheck_url="/health")
    assert LLMProxy(launcher_args=custom).launcher_args is custom
    for kwargs in ({"port": 1}, {"host": "h"}, {"launch_mode": "thread"}, {"num_workers": 2}):
        with pytest.raises(ValueError, match="launcher_args"):
            LLMProxy(launcher_args=custom, **kwargs)


def test_launcher_without_healthcheck_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rollouthub.llm_proxy.proxy"):
        LLMProxy(launcher_args=PythonServerLauncherArgs(port=1234, host="127.0.0.1"))
    assert "healthcheck_url" in caplog.text


def test_middleware_and_callback_aliases() -> None:
    proxy = LLMProxy(
        host="127.0.0.1",
        middlewares=["message_inspection", StreamConversionMiddleware],
        callbacks=["logprobs", "opentelemetry", "return_token_ids"],
    )
    assert proxy.middlewares == [MessageInspectionMiddleware, StreamConversionMiddleware]
    assert proxy.callbacks == [AddLogprobs, LightningOpenTelemetry, AddReturnTokenIds]
    with pytest.raises(ValueError, match="message_inspection, rollout_attempt, stream_conversion"):
        LLMProxy(host="127.0.0.1", middlewares=["nope"])
    with pytest.raises(ValueError, match="logprobs, opentelemetry, return_token_ids"):
        LLMProxy(host="127.0.0.1", callbacks=["nope"])

    class CustomLogger:  # what a LiteLLM callback class would look like
        pass

    with pytest.raises(ValueError, match="LiteLLM CustomLogger classes cannot be used"):
        LLMProxy(host="127.0.0.1", callbacks=[CustomLogger])
    with pytest.raises(ValueError):
        LLMProxy(host="127.0.0.1", callbacks=[AddLogprobs()])  # type: ignore[list-item]

    class Mine(LLMProxyCallback):
        pass

    assert LLMProxy(host="127.0.0.1", callbacks=[Mine]).callbacks == [Mine]


def test_litellm_config_retries_and_ignored_keys(caplog: pytest.LogCaptureFixture) -> None:
    assert LLMProxy(host="127.0.0.1", num_retries=3).num_retries == 3
    config = {"litellm_settings": {"num_retries": 5, "drop_params": True}, "router_settings": {"routing_strategy": "x"}}
    with caplog.at_level(logging.INFO, logger="rollouthub.llm_proxy.proxy"):
        proxy = LLMProxy(host="127.0.0.1", num_retries=1, litellm_config=config)
    assert proxy.num_retries == 5  # an explicit litellm_settings.num_retries wins
    assert config == {
        "litellm_settings": {"num_retries": 5, "drop_params": True},
        "router_settings": {"routing_strategy": "x"},
    }
    assert "litellm_settings.drop_params, router_settings.routing_strategy" in caplog.text
    settings = resolve_proxy_settings(
        {"general_settings": {"master_key": "sk-1"}, "litellm_settings": {"request_timeout": "7"}}
    )
    assert (settings.master_key, settings.timeout, settings.ignored_keys) == ("sk-1", 7.0, [])


def test_model_list_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env-base/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    monkeypatch.setenv("MY_KEY", "from-env")
    plain = parse_deployment({"model_name": "gpt", "litellm_params": {"model": "gpt-4o-mini", "temperature": 0.2}})
    assert (plain.provider, plain.upstream_model, plain.api_base, plain.api_key) == (
        "openai",
        "gpt-4o-mini",
        "http://env-base/v1",
        "env-key",
    )
    assert plain.default_params == {"temperature": 0.2}
    vllm = parse_deployment(
        {
            "model_name": "m",
            "litellm_params": {
                "model": "hosted_vllm/Qwen/Qwen2.5",
                "api_base": "http://h/v1",
                "api_key": "os.environ/MY_KEY",
            },
        }
    )
    assert (vllm.provider, vllm.upstream_model, vllm.api_key) == ("hosted_vllm", "Qwen/Qwen2.5", "from-env")
    assert vllm.url("/chat/completions") == "http://h/v1/chat/completions"
    assert not vllm.is_official_openai
    slashed = parse_deployment(
        {"model_name": "q", "litellm_params": {"model": "Qwen/Qwen2.5", "api_base": "http://h/v1"}}
    )
    assert (slashed.provider, slashed.upstream_model) == ("openai", "Qwen/Qwen2.5")
    anthropic = parse_deployment({"model_name": "c", "litellm_params": {"model": "anthropic/claude", "api_key": "k"}})
    assert anthropic.url("/messages") == "https://api.anthropic.com/v1/messages"
    assert anthropic.auth_headers()["x-api-key"] == "k"
    with pytest.raises(ValueError, match="provider 'azure' is not supported"):
        LLMProxy(host="127.0.0.1", model_list=[{"model_name": "a", "litellm_params": {"model": "azure/gpt"}}])
    with pytest.raises(ValueError, match="api_base"):
        parse_deployment({"model_name": "v", "litellm_params": {"model": "hosted_vllm/x"}})
    with pytest.raises(ValueError):
        parse_deployment({"litellm_params": {}})


LOCAL_ENTRY: Any = {"model_name": "policy", "litellm_params": {"model": "local/tiny"}}


def test_local_and_policy_version_entries() -> None:
    local = parse_deployment(LOCAL_ENTRY)
    assert local.is_local and (local.provider, local.upstream_model) == ("local", "tiny")
    assert not parse_deployment(ENTRY).is_local and parse_deployment(ENTRY).policy_version is None
    assert parse_deployment({**ENTRY, "model_info": {"policy_version": 3}}).policy_version == 3
    assert parse_deployment({**ENTRY, "model_info": {"base_model": "q"}}).policy_version is None
    for info in ({"policy_version": -1}, {"policy_version": "3"}, {"policy_version": True}, "v3"):
        with pytest.raises(ValueError, match="model_info"):
            parse_deployment({**ENTRY, "model_info": info})
    with pytest.raises(ValueError, match="local/<name>"):
        parse_deployment({"model_name": "p", "litellm_params": {"model": "local/"}})


def test_local_backends_refuse_the_forked_launch_mode() -> None:
    """A forked server process would serve a copy of the model that never sees new weights: one clear line."""
    with pytest.raises(ValueError) as info:
        LLMProxy(host="127.0.0.1", model_list=[LOCAL_ENTRY])
    message = str(info.value)
    assert "launch_mode='mp'" in message and "'policy'" in message and "'thread'" in message and "\n" not in message
    with pytest.raises(ValueError, match="launch_mode='mp'"):
        LLMProxy(model_list=[LOCAL_ENTRY], launcher_args=PythonServerLauncherArgs(port=1, launch_mode="mp"))
    forked = LLMProxy(host="127.0.0.1", model_list=[ENTRY])
    with pytest.raises(ValueError, match="launch_mode='mp'"):
        forked.update_model_list([ENTRY, LOCAL_ENTRY])
    assert forked.model_list == [ENTRY]  # unchanged
    threaded = LLMProxy(host="127.0.0.1", launch_mode="thread", model_list=[LOCAL_ENTRY])
    assert threaded.as_resource().model == "policy"


async def test_an_unregistered_local_backend_is_named_at_start() -> None:
    store = LightningStoreThreaded(InMemoryLightningStore())
    proxy = LLMProxy(host="127.0.0.1", launch_mode="thread", model_list=[LOCAL_ENTRY], store=store)
    with pytest.raises(ValueError, match="no local backend 'tiny' is registered"):
        await proxy.start()
    assert not proxy.is_running()
    with pytest.raises(ValueError, match="name"):
        proxy.set_local_backend("", object())  # type: ignore[arg-type]


def test_router_round_robin_and_wildcards() -> None:
    a = parse_deployment({"model_name": "m", "litellm_params": {"model": "openai/a", "api_base": "http://a/v1"}})
    b = parse_deployment({"model_name": "m", "litellm_params": {"model": "openai/b", "api_base": "http://b/v1"}})
    star = parse_deployment({"model_name": "*", "litellm_params": {"model": "openai/*", "api_base": "http://c/v1"}})
    router = ModelRouter([a, b, star])
    firsts = {router.candidates("m")[0].upstream_model for _ in range(4)}
    assert firsts == {"a", "b"} and len(router.candidates("m")) == 2
    assert router.candidates("anything") == [star] and star.upstream_model_for("openai/gpt-x") == "gpt-x"
    assert router.model_names() == ["m"]
    assert ModelRouter([a]).candidates("zzz") == []


def test_update_model_list_and_as_resource() -> None:
    proxy = LLMProxy(host="127.0.0.1")
    with pytest.raises(ValueError, match="no models"):
        proxy.as_resource()
    proxy.update_model_list([ENTRY])
    resource = proxy.as_resource(sampling_parameters={"temperature": 0.5})
    assert type(resource) is agl.ProxyLLM
    assert resource.model == "m" and resource.sampling_parameters == {"temperature": 0.5}
    assert resource.get_base_url("r1", "a1") == f"{proxy.endpoint}/rollout/r1/attempt/a1"
    bound = proxy.as_resource("r1", "a1")
    assert (
        type(bound) is agl.LLM
        and bound.endpoint == f"http://127.0.0.1:{proxy.server_launcher.port}/rollout/r1/attempt/a1"
    )
    with pytest.raises(ValueError):
        proxy.as_resource("r1", None)
    with pytest.raises(ValueError):
        proxy.as_resource(None, "a1")
    proxy.update_model_list([ENTRY, {**ENTRY, "litellm_params": {"model": "openai/other"}}])  # same name twice
    assert proxy.as_resource().model == "m"
    proxy.update_model_list([ENTRY, {"model_name": "n", "litellm_params": {"model": "openai/n"}}])
    with pytest.raises(ValueError, match="several models"):
        proxy.as_resource()
    assert proxy.as_resource(model="n").model == "n"
    keyed = LLMProxy(host="127.0.0.1", model_list=[ENTRY], litellm_config={"general_settings": {"master_key": "sk"}})
    assert keyed.as_resource().api_key == "sk"


class _NoCapabilities(LightningStore):
    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities()


@pytest.mark.parametrize(
    ("mode", "store", "missing"),
    [
        ("mp", InMemoryLightningStore(thread_safe=True), "zero_copy"),
        ("thread", InMemoryLightningStore(), "thread_safe"),
        ("asyncio", _NoCapabilities(), "async_safe"),
    ],
)
async def test_start_checks_store_capabilities(mode: Any, store: LightningStore, missing: str) -> None:
    proxy = LLMProxy(host="127.0.0.1", launch_mode=mode, model_list=[ENTRY], store=store)
    with pytest.raises(RuntimeError, match=missing):
        await proxy.start()
    assert not proxy.is_running()


async def test_start_requires_a_store_and_stop_when_not_running(caplog: pytest.LogCaptureFixture) -> None:
    proxy = LLMProxy(host="127.0.0.1", launch_mode="thread", model_list=[ENTRY])
    with pytest.raises(ValueError, match="store"):
        await proxy.start()
    with pytest.raises(ValueError, match="store"):
        proxy.initialize()
    with caplog.at_level(logging.WARNING, logger="rollouthub.llm_proxy.proxy"):
        await proxy.stop()
    assert "not running" in caplog.text
    proxy.set_store(LightningStoreThreaded(InMemoryLightningStore()))
    assert proxy.get_store() is not None


def test_active_proxy_registry(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="No active LLM proxy"):
        get_active_llm_proxy()
    first, second = LLMProxy(host="127.0.0.1"), LLMProxy(host="127.0.0.1")
    set_active_llm_proxy(first)
    assert get_active_llm_proxy() is first
    with caplog.at_level(logging.WARNING, logger="rollouthub.llm_proxy.proxy"):
        set_active_llm_proxy(second)
    assert get_active_llm_proxy() is second and "Replacing the active LLM proxy" in caplog.text


def test_initialize_llm_callbacks_does_not_accumulate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(callbacks_module, "_registered", None)
    assert initialize_llm_callbacks([AddReturnTokenIds, LightningOpenTelemetry]) is True
    first: List[Any] = list(callbacks_module._registered or [])
    assert initialize_llm_callbacks([AddReturnTokenIds, LightningOpenTelemetry]) is False
    assert callbacks_module._registered == first
    assert initialize_llm_callbacks([AddLogprobs]) is False
    assert [type(c) for c in callbacks_module._registered or []] == [
        AddReturnTokenIds,
        LightningOpenTelemetry,
        AddLogprobs,
    ]


def test_payload_callbacks() -> None:
    vllm = parse_deployment(ENTRY)
    official = parse_deployment(
        {"model_name": "g", "litellm_params": {"model": "openai/gpt", "api_base": "https://api.openai.com/v1"}}
    )
    assert AddReturnTokenIds().pre_call({}, kind="chat", deployment=vllm) == {"return_token_ids": True}
    assert AddReturnTokenIds().pre_call({"return_token_ids": False}, kind="chat", deployment=vllm) == {
        "return_token_ids": False
    }
    assert AddReturnTokenIds().pre_call({}, kind="chat", deployment=official) == {}
    assert AddReturnTokenIds().pre_call({}, kind="embeddings", deployment=vllm) == {}
    assert AddLogprobs().pre_call({}, kind="completions", deployment=vllm) == {"logprobs": 1}


async def test_serve_for_remote_runners_changes_only_a_default_address_of_a_stopped_proxy(
    store: InMemoryLightningStore,
) -> None:
    default = LLMProxy(store=store, launch_mode="thread")
    port = default.server_launcher.port
    assert default.endpoint == f"http://127.0.0.1:{port}" and not default.host_given
    assert default.serve_for_remote_runners("0.0.0.0", "10.1.2.3") is True
    assert default.endpoint == f"http://10.1.2.3:{port}" and default.server_launcher.host == "0.0.0.0"
    assert default.serve_for_remote_runners("0.0.0.0", "127.0.0.1") is True  # an address this test can reach
    await default.start()  # it serves where it says, bound to every interface
    try:
        assert default.serve_for_remote_runners("0.0.0.0", "10.9.9.9") is False  # running: kept as it is
        assert default.endpoint == f"http://127.0.0.1:{port}" and default.server_launcher.host == "0.0.0.0"
    finally:
        await default.stop()
    chosen = LLMProxy(store=store, host="127.0.0.1", launch_mode="thread")
    assert chosen.host_given and chosen.serve_for_remote_runners("0.0.0.0", "10.1.2.3") is False
    assert chosen.endpoint.startswith("http://127.0.0.1:")
    with_args = LLMProxy(store=store, launcher_args=PythonServerLauncherArgs(host="127.0.0.1", healthcheck_url="/h"))
    assert with_args.serve_for_remote_runners("0.0.0.0", "10.1.2.3") is False
