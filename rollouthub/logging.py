"""Logging setup for the ``rollouthub`` logger hierarchy.

Nothing is configured at import time. :func:`setup` (exported as ``rollouthub.setup_logging``) configures the base
``rollouthub`` logger and optional extras; :func:`setup_module` (``rollouthub.setup_module_logging``) configures a
single logger.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import warnings
from typing import Any, Dict, List, Mapping, Optional, Union

__all__ = ["setup_logging", "setup_module_logging", "configure_logger"]

BASE_LOGGER_NAME = "rollouthub"
DEFAULT_FORMAT = "%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s"
DEFAULT_DATE_FORMAT = "%H:%M:%S"

LevelLike = Union[int, str]

_logger = logging.getLogger(__name__)
_OWNED_MARK = "_rollouthub_owned"


def _to_level(level: LevelLike) -> int:
    """Convert a level name or number into a number; invalid names raise ``ValueError``."""
    if isinstance(level, bool):
        raise ValueError(f"Invalid logging level: {level!r}")
    if isinstance(level, int):
        return level
    if isinstance(level, str):
        value = logging.getLevelName(level.strip().upper())
        if isinstance(value, int):
            return value
    raise ValueError(f"Invalid logging level: {level!r}")


def _default_formatter() -> logging.Formatter:
    return logging.Formatter(DEFAULT_FORMAT, datefmt=DEFAULT_DATE_FORMAT)


_PLAIN_FALLBACK_MARK = "_rollouthub_plain_fallback"


def _stream_is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (a closed or odd stream counts as not one)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _wants_rich(color: Union[bool, Mapping[str, Any]]) -> bool:
    """Rich rendering only for a terminal: when ``color`` asks for it and standard output is a TTY, or when the
    caller passes its own Rich ``console``. Writing to a file or a pipe, Rich would cost ~0.7 ms per line (against a
    few microseconds for the plain formatter) for no visible benefit."""
    if not color:
        return False
    if isinstance(color, Mapping) and "console" in color:
        return True
    return _stream_is_terminal(sys.stdout)


def _console_handler(color: Union[bool, Mapping[str, Any]]) -> logging.Handler:
    if color and not _wants_rich(color):
        # Same stream as the Rich handler would use, same message text, the plain default format.
        fallback = logging.StreamHandler(sys.stdout)
        fallback.setFormatter(_default_formatter())
        setattr(fallback, _PLAIN_FALLBACK_MARK, True)
        return fallback
    if color:
        from rich.logging import RichHandler

        options: Dict[str, Any] = {
            "rich_tracebacks": False,
            "markup": False,
            "show_time": True,
            "show_path": True,
        }
        if isinstance(color, Mapping):
            options.update(color)
        return RichHandler(**options)
    handler = logging.StreamHandler()
    handler.setFormatter(_default_formatter())
    return handler


def _disable_other_loggers(keep: str) -> None:
    for name, existing in list(logging.root.manager.loggerDict.items()):
        if not isinstance(existing, logging.Logger):
            continue
        if name == keep or name.startswith(keep + "."):
            continue
        existing.disabled = True


def setup_module(
    level: LevelLike = "INFO",
    *,
    name: str = BASE_LOGGER_NAME,
    console: bool = True,
    color: Union[bool, Mapping[str, Any]] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
) -> logging.Logger:
    """Configure one logger: its level, a console handler (rich when ``color`` on a terminal) and propagation.

    Args:
        level: Level number or name.
        name: Logger to configure.
        console: Attach a console handler.
        color: Use a ``rich`` handler when standard output is a terminal (a mapping gives extra handler options;
            one with a ``console`` always uses Rich); otherwise -- and when writing to a file or pipe -- a plain
            stream handler with the default format (the same message text).
        propagate: Whether records propagate to ancestor loggers.
        disable_existing_loggers: Disable every other existing logger outside this hierarchy.

    Returns:
        The configured logger.

    Raises:
        ValueError: If ``level`` is not a valid level.
    """
    numeric = _to_level(level)
    target = logging.getLogger(name)
    for handler in list(target.handlers):
        target.removeHandler(handler)
        if getattr(handler, _OWNED_MARK, False):
            handler.close()
    if console:
        handler = _console_handler(color)
        setattr(handler, _OWNED_MARK, True)
        target.addHandler(handler)
    target.setLevel(numeric)
    target.propagate = propagate
    target.disabled = False
    if disable_existing_loggers:
        _disable_other_loggers(name)
    return target


def _file_handler(path: str, level: int) -> logging.FileHandler:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(level)
    handler.setFormatter(_default_formatter())
    setattr(handler, _OWNED_MARK, True)
    return handler


def _add_file_handler(target: logging.Logger, filename: str, level: int) -> None:
    path = os.path.abspath(filename)
    for existing in target.handlers:
        if isinstance(existing, logging.FileHandler) and os.path.abspath(existing.baseFilename) == path:
            return
    target.addHandler(_file_handler(path, level))


def setup(
    level: LevelLike = "INFO",
    *,
    console: bool = True,
    color: Union[bool, Mapping[str, Any]] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
    capture_warnings: bool = False,
    submodule_levels: Optional[Mapping[str, LevelLike]] = None,
    extra_handlers: Optional[List[logging.Handler]] = None,
    formatter: Optional[logging.Formatter] = None,
    apply_to: Optional[List[str]] = None,
    files: Optional[Union[str, Mapping[str, str]]] = None,
) -> None:
    """Configure logging for the ``rollouthub`` hierarchy.

    Args:
        level: Level of the base logger.
        console: Attach a console handler to the base logger.
        color: Use a ``rich`` console handler on a terminal (a mapping gives handler options); a plain formatter
            when standard output is not a terminal.
        propagate: Whether base-logger records propagate to the root logger.
        disable_existing_loggers: Disable other existing loggers.
        capture_warnings: Route :mod:`warnings` into logging.
        submodule_levels: ``{logger_name: level}`` overrides (a warning is logged when more verbose than the base).
        extra_handlers: Handlers added to the base logger (unless already present).
        formatter: Formatter applied to base-logger handlers that have none (and to the plain console handler that
            stands in for Rich when standard output is not a terminal).
        apply_to: Other loggers that get the base logger's handlers and level (and ``propagate=False``).
        files: A filename for a base-logger file handler, or ``{logger_name: filename}`` for per-logger files.

    Raises:
        ValueError: If a level is invalid.
    """
    if platform.system() == "Windows":
        os.environ["PYTHONUTF8"] = "1"
    base_level = _to_level(level)
    base = setup_module(
        base_level,
        name=BASE_LOGGER_NAME,
        console=console,
        color=color,
        propagate=propagate,
        disable_existing_loggers=disable_existing_loggers,
    )
    if formatter is not None:
        for handler in base.handlers:
            if handler.formatter is None or getattr(handler, _PLAIN_FALLBACK_MARK, False):
                handler.setFormatter(formatter)
    for handler in extra_handlers or []:
        if handler not in base.handlers:
            base.addHandler(handler)
    for name, sub_level in (submodule_levels or {}).items():
        numeric = _to_level(sub_level)
        logging.getLogger(name).setLevel(numeric)
        if numeric < base_level:
            _logger.warning(
                "Logger %r is set to %s, more verbose than the base level %s.",
                name,
                logging.getLevelName(numeric),
                logging.getLevelName(base_level),
            )
    if isinstance(files, str):
        _add_file_handler(base, files, base_level)
    elif files:
        for name, filename in files.items():
            target = logging.getLogger(name)
            _add_file_handler(target, filename, target.getEffectiveLevel())
    for name in apply_to or []:
        target = logging.getLogger(name)
        for handler in list(target.handlers):
            target.removeHandler(handler)
        for handler in base.handlers:
            target.addHandler(handler)
        target.setLevel(base.level)
        target.propagate = False
    if capture_warnings:
        logging.captureWarnings(True)


def configure_logger(level: LevelLike = logging.INFO, name: str = BASE_LOGGER_NAME) -> logging.Logger:
    """Deprecated: equivalent to ``setup_module(level, name=name, console=True, color=True, propagate=False)``."""
    warnings.warn(
        "configure_logger is deprecated; use rollouthub.setup_logging (or setup_module_logging) instead.",
        DeprecationWarning,
        stacklevel=2,
    )
    return setup_module(level, name=name, console=True, color=True, propagate=False)


setup_logging = setup
"""Alias of :func:`setup` (exported at the package top level)."""

setup_module_logging = setup_module
"""Alias of :func:`setup_module` (exported at the package top level)."""
