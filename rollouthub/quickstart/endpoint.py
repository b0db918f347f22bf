"""The quickstart's pre-run check of a real OpenAI-compatible endpoint (``--llm-endpoint``)."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from typing import Tuple

__all__ = ["ENV_ENDPOINT", "EndpointError", "check_llm_endpoint"]

ENV_ENDPOINT = "$OPENAI_BASE_URL"


class EndpointError(RuntimeError):
    """The requested LLM endpoint is unusable; the message is one line."""


def check_llm_endpoint(requested: str, timeout: float = 10.0) -> Tuple[str, str]:
    """Resolve ``--llm-endpoint`` and check it answers before any work starts: ``(base URL, API key)``.

    ``GET <base>/models`` with the key: no answer, or 401/403, is an :class:`EndpointError`; any other HTTP answer
    (some servers have no ``/models``) counts as reachable.
    """
    base = os.environ.get("OPENAI_BASE_URL", "") if requested == ENV_ENDPOINT else requested
    if not base:
        raise EndpointError("--llm-endpoint without a URL needs OPENAI_BASE_URL to be set")
    if not base.startswith(("http://", "https://")):
        raise EndpointError(f"--llm-endpoint {base!r} is not an http(s) URL")
    key = os.environ.get("OPENAI_API_KEY", "")
    if not key:
        raise EndpointError(f"the LLM endpoint {base} needs an API key: set OPENAI_API_KEY")
    request = urllib.request.Request(base.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise EndpointError(f"the LLM endpoint {base} rejected OPENAI_API_KEY (HTTP {exc.code})") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise EndpointError(f"cannot reach the LLM endpoint {base}: {reason}") from None
    return base, key
