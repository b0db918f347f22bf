"""rollouthub: open infrastructure for training AI agents from their own traces.

API-compatible with Agent Lightning v0.3: ``import rollouthub as agl``.
"""

from __future__ import annotations

from typing import Any

from .adapter import *  # noqa: F403
from .adapter import __all__ as _adapter_all
from .algorithm import *  # noqa: F403
from .algorithm import __all__ as _algorithm_all
from .config import *  # noqa: F403
from .config import __all__ as _config_all
from .emitter import *  # noqa: F403
from .emitter import __all__ as _emitter_all
from .env_var import LightningEnvVar, resolve_bool_env_var, resolve_int_env_var, resolve_str_env_var
from .execution import *  # noqa: F403
from .execution import __all__ as _execution_all
from .legacy_v01 import AgentLightningClient, AgentLightningServer, DevTaskLoader
from .litagent import *  # noqa: F403
from .litagent import __all__ as _litagent_all
from .llm_proxy import LLMProxy
from .logging import *  # noqa: F403
from .logging import __all__ as _logging_all
from .runner import *  # noqa: F403
from .runner import __all__ as _runner_all
from .store import *  # noqa: F403
from .store import __all__ as _store_all
from .store import __getattr__ as _store_getattr
from .tracer import *  # noqa: F403
from .tracer import __all__ as _tracer_all
from .trainer import *  # noqa: F403
from .trainer import __all__ as _trainer_all
from .types import *  # noqa: F403
from .types import __all__ as _types_all

__version__ = "0.3.0"

__all__ = [
    *_adapter_all,
    *_algorithm_all,
    *_config_all,
    *_emitter_all,
    "LightningEnvVar",
    "resolve_bool_env_var",
    "resolve_int_env_var",
    "resolve_str_env_var",
    *_execution_all,
    *_litagent_all,
    "LLMProxy",
    *_logging_all,
    *_runner_all,
    *_store_all,
    *_tracer_all,
    *_trainer_all,
    *_types_all,
    "AgentLightningClient",
    "AgentLightningServer",
    "DevTaskLoader",
    "__version__",
]


def __getattr__(name: str) -> Any:
    """Lazily resolve heavier exports (store server, client, SQL store)."""
    return _store_getattr(name)
