"""Model list (LiteLLM ``model_list`` entries) and proxy settings of the native LLM-proxy engine.

The native engine routes a request by its ``model`` field to a *deployment*: one ``model_list`` entry resolved to an
upstream URL, an upstream model name and credentials. Supported ``litellm_params["model"]`` forms:

* ``"openai/<m>"``, ``"hosted_vllm/<m>"``, ``"custom_openai/<m>"``, ``"openai_like/<m>"``,
  ``"text-completion-openai/<m>"`` — an OpenAI-compatible HTTP backend (the prefix is stripped upstream);
* ``"anthropic/<m>"`` — the Anthropic Messages API (``POST /v1/messages`` only);
* ``"local/<name>"`` — the local policy backend registered with the proxy under ``<name>``
  (:class:`~rollouthub.llm_proxy.local_backend.LocalPolicyBackend`, served in the proxy's process);
* ``"<m>"`` (no known provider prefix, e.g. ``"gpt-4o-mini"`` or ``"Qwen/Qwen2.5-0.5B"``) — OpenAI-compatible.

An entry may carry ``model_info: {"policy_version": N}``: the version of the policy that deployment serves, recorded
on the spans of its calls (an algorithm bumps it with ``LLMProxy.update_model_list``).

String values of the form ``"os.environ/NAME"`` are read from the environment, as in LiteLLM configs.
"""

from __future__ import annotations

import fnmatch
import itertools
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from typing_extensions import NotRequired, TypedDict

__all__ = [
    "ModelConfig",
    "Deployment",
    "ModelRouter",
    "ProxySettings",
    "OPENAI_COMPATIBLE_PROVIDERS",
    "LOCAL_PROVIDER",
    "parse_deployment",
    "resolve_proxy_settings",
    "model_names",
]

logger = logging.getLogger(__name__)


class ModelConfig(TypedDict):
    """One LiteLLM ``model_list`` entry: ``{"model_name": str, "litellm_params": dict}`` and optionally
    ``"model_info": dict`` (rollouthub reads its ``policy_version``)."""

    model_name: str
    litellm_params: Dict[str, Any]
    model_info: NotRequired[Dict[str, Any]]


OPENAI_COMPATIBLE_PROVIDERS: Tuple[str, ...] = (
    "openai",
    "hosted_vllm",
    "custom_openai",
    "openai_like",
    "text-completion-openai",
)
"""Provider prefixes served through the OpenAI-compatible HTTP API."""

ANTHROPIC_PROVIDER = "anthropic"
LOCAL_PROVIDER = "local"
"""``litellm_params.model`` prefix of a local policy backend registered with the proxy (``"local/<name>"``)."""

_UNSUPPORTED_PROVIDERS = frozenset(
    {
        "azure",
        "azure_ai",
        "bedrock",
        "vertex_ai",
        "gemini",
        "cohere",
        "ollama",
        "ollama_chat",
        "huggingface",
        "sagemaker",
        "watsonx",
        "replicate",
        "databricks",
        "vllm",
    }
)
"""LiteLLM providers the native engine cannot talk to (they need provider-specific request formats or SDKs)."""

_OPENAI_DEFAULT_BASE = "https://api.openai.com/v1"
_ANTHROPIC_DEFAULT_BASE = "https://api.anthropic.com"

_ROUTING_ONLY_PARAMS = frozenset(
    {
        "model",
        "api_base",
        "base_url",
        "api_key",
        "timeout",
        "stream_timeout",
        "extra_headers",
        "headers",
        "num_retries",
        "max_retries",
        "mock_response",
        "rpm",
        "tpm",
        "order",
        "weight",
        "organization",
        "api_version",
        "input_cost_per_token",
        "output_cost_per_token",
        "custom_llm_provider",
        "extra_body",
    }
)
"""``litellm_params`` keys that configure routing; all other keys are default request parameters."""

_HONOURED_CONFIG_KEYS = frozenset(
    {
        "litellm_settings.num_retries",
        "litellm_settings.request_timeout",
        "router_settings.num_retries",
        "router_settings.timeout",
        "general_settings.master_key",
    }
)


def _env_value(value: Any) -> Any:
    """Resolve LiteLLM's ``"os.environ/NAME"`` indirection (other values unchanged)."""
    if isinstance(value, str) and value.startswith("os.environ/"):
        return os.environ.get(value[len("os.environ/") :])
    return value


def _split_provider(model: str) -> Tuple[str, str]:
    """``(provider, upstream model)`` of a ``litellm_params["model"]`` string."""
    prefix, sep, rest = model.partition("/")
    if sep and (prefix in OPENAI_COMPATIBLE_PROVIDERS or prefix in (ANTHROPIC_PROVIDER, LOCAL_PROVIDER)):
        return prefix, rest
    if sep and prefix in _UNSUPPORTED_PROVIDERS:
        raise ValueError(
            f"Model {model!r}: provider {prefix!r} is not supported by the native LLM-proxy engine. Supported "
            f"prefixes: {', '.join(OPENAI_COMPATIBLE_PROVIDERS + (ANTHROPIC_PROVIDER, LOCAL_PROVIDER))} (or no "
            "prefix for any OpenAI-compatible endpoint given as api_base)."
        )
    return "openai", model


@dataclass
class Deployment:
    """A ``model_list`` entry resolved for forwarding."""

    model_name: str
    provider: str
    upstream_model: str
    api_base: str
    api_key: Optional[str] = None
    timeout: Optional[float] = None
    headers: Dict[str, str] = field(default_factory=dict)
    num_retries: Optional[int] = None
    mock_response: Any = None
    default_params: Dict[str, Any] = field(default_factory=dict)
    extra_body: Dict[str, Any] = field(default_factory=dict)
    policy_version: Optional[int] = None

    @property
    def is_wildcard(self) -> bool:
        """Whether ``model_name`` is a glob pattern (e.g. ``"*"``)."""
        return any(ch in self.model_name for ch in "*?[")

    @property
    def is_anthropic(self) -> bool:
        """Whether the backend speaks the Anthropic Messages API."""
        return self.provider == ANTHROPIC_PROVIDER

    @property
    def is_local(self) -> bool:
        """Whether a local policy backend in the proxy's process serves it (``litellm_params.model`` ``local/<name>``)."""
        return self.provider == LOCAL_PROVIDER

    @property
    def is_official_openai(self) -> bool:
        """Whether the backend is api.openai.com (which rejects vLLM-only parameters such as ``return_token_ids``)."""
        return "api.openai.com" in self.api_base

    def upstream_model_for(self, requested: str) -> str:
        """The upstream model name for a request of model ``requested`` (wildcards forward the requested name)."""
        if self.upstream_model in ("*", "") or self.upstream_model.endswith("/*"):
            try:
                return _split_provider(requested)[1]
            except ValueError:
                return requested
        return self.upstream_model

    def url(self, path: str) -> str:
        """Absolute upstream URL of an OpenAI route (``path`` like ``/chat/completions``) or ``/messages``."""
        base = self.api_base.rstrip("/")
        if self.is_anthropic and not base.endswith("/v1"):
            base += "/v1"
        return base + path

    def auth_headers(self) -> Dict[str, str]:
        """Authentication headers for the upstream request."""
        headers: Dict[str, str] = {}
        if self.is_anthropic:
            if self.api_key:
                headers["x-api-key"] = self.api_key
            headers["anthropic-version"] = "2023-06-01"
        elif self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(self.headers)
        return headers


def parse_deployment(entry: Mapping[str, Any], *, resolve_env: bool = True) -> Deployment:
    """Validate one ``model_list`` entry and resolve it (``ValueError`` on malformed or unsupported entries).

    With ``resolve_env=False`` only the structure and the provider are validated (api bases and keys are read
    from the environment when the proxy starts).
    """
    if not isinstance(entry, Mapping):
        raise ValueError(f"model_list entries must be dicts, got {type(entry).__name__}")
    model_name = entry.get("model_name")
    if not isinstance(model_name, str) or not model_name:
        raise ValueError(f"model_list entry without a model_name: {entry!r}")
    params = entry.get("litellm_params") or {}
    if not isinstance(params, Mapping):
        raise ValueError(f"litellm_params of model {model_name!r} must be a dict")
    params = {key: _env_value(value) for key, value in params.items()}
    model = params.get("model", model_name)
    if not isinstance(model, str) or not model:
        raise ValueError(f"litellm_params.model of model {model_name!r} must be a non-empty string")
    provider, upstream_model = _split_provider(model)
    if provider == LOCAL_PROVIDER and not upstream_model:
        raise ValueError(f"litellm_params.model of model {model_name!r} must name the local backend: 'local/<name>'")
    policy_version = _policy_version(model_name, entry.get("model_info"))
    api_base = params.get("api_base") or params.get("base_url")
    api_key = params.get("api_key")
    if resolve_env:
        if provider == ANTHROPIC_PROVIDER:
            api_base = (
                api_base
                or os.environ.get("ANTHROPIC_API_BASE")
                or os.environ.get("ANTHROPIC_BASE_URL")
                or _ANTHROPIC_DEFAULT_BASE
            )
            api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        elif provider == LOCAL_PROVIDER:
            api_base = api_base or f"local://{upstream_model}"
        elif provider == "hosted_vllm":
            api_base = api_base or os.environ.get("HOSTED_VLLM_API_BASE")
            if not api_base:
                raise ValueError(
                    f"Model {model_name!r} ({model}) needs litellm_params.api_base (or HOSTED_VLLM_API_BASE)"
                )
            api_key = api_key or os.environ.get("HOSTED_VLLM_API_KEY")
        else:
            api_base = (
                api_base
                or os.environ.get("OPENAI_BASE_URL")
                or os.environ.get("OPENAI_API_BASE")
                or _OPENAI_DEFAULT_BASE
            )
            api_key = api_key or os.environ.get("OPENAI_API_KEY")
    headers: Dict[str, str] = {}
    for key in ("headers", "extra_headers"):
        value = params.get(key)
        if isinstance(value, Mapping):
            headers.update({str(k): str(v) for k, v in value.items()})
    timeout = params.get("timeout")
    retries = params.get("num_retries", params.get("max_retries"))
    extra_body = params.get("extra_body")
    return Deployment(
        model_name=model_name,
        provider=provider,
        upstream_model=upstream_model,
        api_base=str(api_base or ""),
        api_key=str(api_key) if api_key else None,
        timeout=float(timeout) if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None,
        headers=headers,
        num_retries=int(retries) if isinstance(retries, int) and not isinstance(retries, bool) else None,
        mock_response=params.get("mock_response"),
        default_params={k: v for k, v in params.items() if k not in _ROUTING_ONLY_PARAMS},
        extra_body=dict(extra_body) if isinstance(extra_body, Mapping) else {},
        policy_version=policy_version,
    )


def _policy_version(model_name: str, model_info: Any) -> Optional[int]:
    """``model_info["policy_version"]`` of an entry (``None`` when absent; ``ValueError`` unless an integer >= 0)."""
    if model_info is None:
        return None
    if not isinstance(model_info, Mapping):
        raise ValueError(f"model_info of model {model_name!r} must be a dict")
    version = model_info.get("policy_version")
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"model_info.policy_version of model {model_name!r} must be an integer >= 0, got {version!r}")
    return version


def model_names(model_list: Iterable[Mapping[str, Any]]) -> List[str]:
    """Distinct ``model_name`` values in order of first appearance."""
    names: List[str] = []
    for entry in model_list:
        name = entry.get("model_name") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names


class ModelRouter:
    """Select the deployments serving a model name: exact names first, then wildcard patterns; round robin."""

    def __init__(self, deployments: Sequence[Deployment]) -> None:
        """Index ``deployments`` by model name."""
        self.deployments = list(deployments)
        self._exact: Dict[str, List[Deployment]] = {}
        self._wildcards: List[Deployment] = []
        for deployment in self.deployments:
            if deployment.is_wildcard:
                self._wildcards.append(deployment)
            else:
                self._exact.setdefault(deployment.model_name, []).append(deployment)
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def candidates(self, model: str) -> List[Deployment]:
        """Deployments for ``model`` in the order to try them (rotated per call); empty when unknown."""
        found = self._exact.get(model) or [d for d in self._wildcards if fnmatch.fnmatchcase(model, d.model_name)]
        if len(found) <= 1:
            return list(found)
        with self._lock:
            start = next(self._counter) % len(found)
        return found[start:] + found[:start]

    def model_names(self) -> List[str]:
        """Names served by exact entries (wildcard patterns are not listed)."""
        return list(self._exact)


@dataclass
class ProxySettings:
    """What the native engine takes from ``litellm_config`` and the constructor."""

    num_retries: int = 0
    timeout: Optional[float] = 600.0
    master_key: Optional[str] = None
    ignored_keys: List[str] = field(default_factory=list)


def _flatten_keys(config: Mapping[str, Any], prefix: str = "") -> List[str]:
    keys: List[str] = []
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            keys.extend(_flatten_keys(value, dotted + "."))
        else:
            keys.append(dotted)
    return keys


def _number(value: Any) -> Optional[float]:
    value = _env_value(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def resolve_proxy_settings(litellm_config: Mapping[str, Any]) -> ProxySettings:
    """Read the keys the native engine honours from a LiteLLM proxy config; list the others as ignored.

    Honoured: ``litellm_settings.num_retries`` (falls back to ``router_settings.num_retries``),
    ``litellm_settings.request_timeout`` (falls back to ``router_settings.timeout``) and
    ``general_settings.master_key`` (clients must then send ``Authorization: Bearer <key>``).
    """
    litellm_settings = litellm_config.get("litellm_settings") or {}
    router_settings = litellm_config.get("router_settings") or {}
    general_settings = litellm_config.get("general_settings") or {}
    settings = ProxySettings()
    retries = _number(litellm_settings.get("num_retries", router_settings.get("num_retries")))
    if retries is not None:
        settings.num_retries = max(0, int(retries))
    timeout = _number(litellm_settings.get("request_timeout", router_settings.get("timeout")))
    if timeout is not None:
        settings.timeout = timeout
    master_key = _env_value(general_settings.get("master_key"))
    settings.master_key = str(master_key) if master_key else None
    settings.ignored_keys = [key for key in _flatten_keys(litellm_config) if key not in _HONOURED_CONFIG_KEYS]
    return settings
