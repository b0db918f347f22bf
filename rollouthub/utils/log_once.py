"""Log a message at most once per process (notices about optional packages, fallbacks, ...)."""

from __future__ import annotations

import logging
import threading
from typing import Any, Set

__all__ = ["log_once", "forget_logged_once"]

_logged: Set[str] = set()
_lock = threading.Lock()


def log_once(logger: logging.Logger, level: int, key: str, message: str, *args: Any) -> bool:
    """Log ``message % args`` at ``level`` unless a message with the same ``key`` was logged in this process.

    The key is remembered even when ``level`` is filtered out by the logger, so a notice never turns up later, e.g.
    from a second runner in the same process. Returns whether this call logged (or would have logged) the message.
    """
    with _lock:
        if key in _logged:
            return False
        _logged.add(key)
    logger.log(level, message, *args)
    return True


def forget_logged_once(key: str | None = None) -> None:
    """Forget ``key`` (every key when ``None``) so that the next :func:`log_once` with it logs again (tests)."""
    with _lock:
        if key is None:
            _logged.clear()
        else:
            _logged.discard(key)
