"""Environment variables understood by rollouthub and their resolvers."""

from __future__ import annotations

import os
from enum import Enum
from typing import Optional, Union, overload

__all__ = [
    "LightningEnvVar",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
    "resolve_api_token",
    "API_TOKEN_ENV",
    "RUNNER_NODE_ENV",
]

API_TOKEN_ENV = "ROLLOUTHUB_API_TOKEN"
"""Bearer token shared by the store server (``rollouthub store``), the client and the OTLP exporter."""

RUNNER_NODE_ENV = "ROLLOUTHUB_RUNNER_NODE"
"""The machine a runner runs on (e.g. its Ray node's IP address); runners report it in their heartbeats as
``heartbeat_stats["node"]``. Set by the ``ray`` strategy in each runner actor; unset elsewhere."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_ACCEPTED_BOOLEANS = ", ".join(_TRUE + _FALSE)


class LightningEnvVar(Enum):
    """Environment variables of the runtime; the value is the variable name."""

    AGL_EMITTER_DEBUG = "AGL_EMITTER_DEBUG"
    AGL_MANAGED_STORE = "AGL_MANAGED_STORE"
    AGL_CURRENT_ROLE = "AGL_CURRENT_ROLE"
    AGL_SERVER_HOST = "AGL_SERVER_HOST"
    AGL_SERVER_PORT = "AGL_SERVER_PORT"


def _name(var: Union[LightningEnvVar, str]) -> str:
    return var.value if isinstance(var, LightningEnvVar) else str(var)


@overload
def resolve_bool_env_var(
    var: Union[LightningEnvVar, str], override: Optional[bool] = None, *, fallback: bool
) -> bool: ...


@overload
def resolve_bool_env_var(
    var: Union[LightningEnvVar, str], override: Optional[bool] = None, fallback: Optional[bool] = None
) -> Optional[bool]: ...


def resolve_bool_env_var(
    var: Union[LightningEnvVar, str], override: Optional[bool] = None, fallback: Optional[bool] = None
) -> Optional[bool]:
    """Resolve a boolean variable: a non-None ``override`` wins; unset → ``fallback``; else parse 1/true/yes/on, 0/false/no/off."""
    if override is not None:
        return override
    name = _name(var)
    raw = os.environ.get(name)
    if raw is None:
        return fallback
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name} must be one of {_ACCEPTED_BOOLEANS} (case-insensitive), got {raw!r}")


def resolve_int_env_var(
    var: Union[LightningEnvVar, str], override: Optional[int] = None, fallback: Optional[int] = None
) -> Optional[int]:
    """Resolve an integer variable: a non-None ``override`` wins; unset → ``fallback``; else ``int(value)``."""
    if override is not None:
        return override
    name = _name(var)
    raw = os.environ.get(name)
    if raw is None:
        return fallback
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer") from None


def resolve_str_env_var(
    var: Union[LightningEnvVar, str], override: Optional[str] = None, fallback: Optional[str] = None
) -> Optional[str]:
    """Resolve a string variable verbatim: a non-None ``override`` wins; unset → ``fallback``."""
    if override is not None:
        return override
    raw = os.environ.get(_name(var))
    return fallback if raw is None else raw


def resolve_api_token(override: Optional[str] = None) -> Optional[str]:
    """The bearer token to use: ``override``, else ``ROLLOUTHUB_API_TOKEN``; empty strings mean "no token"."""
    token = resolve_str_env_var(API_TOKEN_ENV, override)
    return token or None
