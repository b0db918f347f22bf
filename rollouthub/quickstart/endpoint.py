"""The quickstart's pre-run check of a real OpenAI-compatible endpoint (``--llm-endpoint``)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Optional, Tuple

__all__ = ["ENV_ENDPOINT", "EndpointError", "check_llm_endpoint"]

ENV_ENDPOINT = "$OPENAI_BASE_URL"


class EndpointError(RuntimeError):
    """The requested LLM endpoint is unusable; the message is one line."""


def check_llm_endpoint(requested: str, model: Optional[str] = None, timeout: float = 10.0) -> Tuple[str, str]:
    """Resolve ``--llm-endpoint`` and check it answers before any work starts: ``(base URL, API key)``.

    ``GET <base>/models`` with the key: no answer, or 401/403, is an :class:`EndpointError`; any other HTTP answer
    (some servers have no ``/models``) counts as reachable. With ``model``, one real chat completion follows (a
    one-word prompt, 5 tokens at most): an endpoint that cannot serve it (unknown model, no chat route) is an
    :class:`EndpointError` too.
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
    if model is not None:
        _check_chat(base, key, model, timeout)
    return base, key


def _check_chat(base: str, key: str, model: str, timeout: float) -> None:
    """One chat completion; :class:`EndpointError` naming the status and the server's message when it fails."""
    body = {"model": model, "messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 5}
    request = urllib.request.Request(
        base.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=max(timeout, 30.0)) as response:
            answer = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = _error_message(exc.read())
        raise EndpointError(
            f"the LLM endpoint {base} failed a chat completion with model {model!r}: HTTP {exc.code}{detail}"
        ) from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise EndpointError(
            f"the LLM endpoint {base} failed a chat completion with model {model!r}: {reason}"
        ) from None
    if not isinstance(answer, dict) or not answer.get("choices"):
        raise EndpointError(f"the LLM endpoint {base} answered a chat completion without choices (model {model!r})")


def _error_message(body: bytes) -> str:
    """``: <message>`` from an OpenAI-style error body (first line, 200 characters at most), or ``""``."""
    try:
        parsed = json.loads(body)
        message = parsed.get("error", {}).get("message") if isinstance(parsed, dict) else None
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace")
    text = " ".join(str(message or "").split())[:200]
    return f": {text}" if text else ""
