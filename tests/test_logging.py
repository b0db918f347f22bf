"""Logging setup."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Iterator, List

import pytest
from rich.logging import RichHandler

from rollouthub import logging as rh_logging

# Note: ``setup``/``setup_module`` are not imported by name: pytest would take a module-level ``setup_module`` for
# its own xunit-style module fixture.

TOUCHED = ["rollouthub", "rollouthub.store", "rollouthub.runner", "rollouthub.logging", "thirdparty", "thirdparty.sub"]


class ListHandler(logging.Handler):
    """Collects formatted records."""

    def __init__(self) -> None:
        super().__init__()
        self.records: List[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def restore_loggers() -> Iterator[None]:
    """Snapshot and restore the loggers these tests touch."""
    saved = {}
    for name in TOUCHED:
        logger = logging.getLogger(name)
        saved[name] = (list(logger.handlers), logger.level, logger.propagate, logger.disabled)
    showwarning = warnings.showwarning
    yield
    logging.captureWarnings(False)
    warnings.showwarning = showwarning
    for name, (handlers, level, propagate, disabled) in saved.items():
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            if handler not in handlers and isinstance(handler, logging.FileHandler):
                handler.close()
        for handler in handlers:
            logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate
        logger.disabled = disabled


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard output counts as a terminal (Rich is chosen only then)."""
    monkeypatch.setattr(rh_logging, "_stream_is_terminal", lambda stream: True)


def test_nothing_configured_at_import() -> None:
    import importlib

    importlib.reload(rh_logging)
    assert all(not getattr(h, "_rollouthub_owned", False) for h in logging.getLogger().handlers)


def test_aliases() -> None:
    assert rh_logging.setup_logging is rh_logging.setup
    assert rh_logging.setup_module_logging is rh_logging.setup_module


def test_setup_module_plain_console_handler() -> None:
    logger = rh_logging.setup_module("DEBUG", name="thirdparty", color=False, propagate=True)
    assert logger is logging.getLogger("thirdparty")
    assert logger.level == logging.DEBUG
    assert logger.propagate is True
    (handler,) = logger.handlers
    assert type(handler) is logging.StreamHandler
    assert handler.formatter is not None
    assert handler.formatter._fmt == "%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s"
    assert handler.formatter.datefmt == "%H:%M:%S"


def test_setup_module_rich_handler_and_options(terminal: None) -> None:
    logger = rh_logging.setup_module(logging.WARNING, name="thirdparty")
    (handler,) = logger.handlers
    assert isinstance(handler, RichHandler)
    assert logger.level == logging.WARNING
    assert logger.propagate is False
    logger = rh_logging.setup_module("INFO", name="thirdparty", color={"show_path": False})
    (handler,) = logger.handlers  # re-configuring replaces, not accumulates
    assert isinstance(handler, RichHandler)
    assert handler._log_render.show_path is False


def test_setup_module_without_console() -> None:
    assert rh_logging.setup_module("INFO", name="thirdparty", console=False).handlers == []


def test_invalid_levels() -> None:
    with pytest.raises(ValueError):
        rh_logging.setup_module("LOUD", name="thirdparty")
    with pytest.raises(ValueError):
        rh_logging.setup("nope")
    assert rh_logging.setup_module("warning", name="thirdparty").level == logging.WARNING


def test_disable_existing_loggers() -> None:
    other = logging.getLogger("thirdparty.sub")
    rh_logging.setup_module("INFO", name="rollouthub", disable_existing_loggers=True)
    assert other.disabled
    assert not logging.getLogger("rollouthub.store").disabled


def test_setup_configures_base_logger() -> None:
    rh_logging.setup("DEBUG", color=False)
    base = logging.getLogger("rollouthub")
    assert base.level == logging.DEBUG
    assert base.propagate is False
    assert len(base.handlers) == 1


def test_setup_extra_handlers_and_formatter(terminal: None) -> None:
    extra = ListHandler()
    formatter = logging.Formatter("CUSTOM %(message)s")
    rh_logging.setup("INFO", extra_handlers=[extra], formatter=formatter)
    rh_logging.setup("INFO", extra_handlers=[extra], formatter=formatter)  # not added twice
    base = logging.getLogger("rollouthub")
    assert base.handlers.count(extra) == 1
    console = next(h for h in base.handlers if isinstance(h, RichHandler))
    assert console.formatter is formatter  # the console handler had no formatter → gets this one
    logging.getLogger("rollouthub.runner").info("hello")
    assert [r.getMessage() for r in extra.records] == ["hello"]


def test_setup_keeps_existing_formatters() -> None:
    rh_logging.setup("INFO", color=False, formatter=logging.Formatter("X %(message)s"))
    (handler,) = logging.getLogger("rollouthub").handlers
    assert handler.formatter is not None and handler.formatter._fmt != "X %(message)s"


def test_submodule_levels_and_verbosity_warning() -> None:
    collector = ListHandler()
    rh_logging.setup("INFO", console=False, extra_handlers=[collector], submodule_levels={"rollouthub.store": "DEBUG"})
    assert logging.getLogger("rollouthub.store").level == logging.DEBUG
    warnings_logged = [r for r in collector.records if r.levelno == logging.WARNING]
    assert any("rollouthub.store" in r.getMessage() for r in warnings_logged)
    collector.records.clear()
    rh_logging.setup("INFO", console=False, extra_handlers=[collector], submodule_levels={"rollouthub.store": "ERROR"})
    assert logging.getLogger("rollouthub.store").level == logging.ERROR
    assert not [r for r in collector.records if r.levelno == logging.WARNING]


def test_files_single_path(tmp_path: Path) -> None:
    target = tmp_path / "nested" / "dir" / "run.log"
    rh_logging.setup("INFO", console=False, files=str(target))
    rh_logging.setup("INFO", console=False, files=str(target))  # no duplicate handler for the same path
    base = logging.getLogger("rollouthub")
    file_handlers = [h for h in base.handlers if isinstance(h, logging.FileHandler)]
    assert len(file_handlers) == 1
    assert file_handlers[0].level == logging.INFO
    logging.getLogger("rollouthub.runner").info("to file ✓")
    logging.getLogger("rollouthub.runner").debug("filtered")
    file_handlers[0].flush()
    content = target.read_text(encoding="utf-8")
    assert "to file ✓" in content
    assert "[INFO] (Process-" in content
    assert "filtered" not in content


def test_files_per_logger(tmp_path: Path) -> None:
    logging.getLogger("thirdparty").setLevel(logging.WARNING)
    store_log, other_log = tmp_path / "store.log", tmp_path / "other" / "third.log"
    rh_logging.setup("INFO", console=False, files={"rollouthub.store": str(store_log), "thirdparty": str(other_log)})
    (store_handler,) = [h for h in logging.getLogger("rollouthub.store").handlers if isinstance(h, logging.FileHandler)]
    (other_handler,) = [h for h in logging.getLogger("thirdparty").handlers if isinstance(h, logging.FileHandler)]
    assert store_handler.level == logging.INFO  # effective level inherited from the base logger
    assert other_handler.level == logging.WARNING
    assert os.path.isdir(tmp_path / "other")


def test_apply_to_shares_base_handlers() -> None:
    logging.getLogger("thirdparty").addHandler(ListHandler())
    rh_logging.setup("WARNING", color=False, apply_to=["thirdparty"])
    base = logging.getLogger("rollouthub")
    other = logging.getLogger("thirdparty")
    assert other.handlers == base.handlers
    assert other.level == logging.WARNING
    assert other.propagate is False


def test_capture_warnings() -> None:
    collector = ListHandler()
    logging.getLogger("py.warnings").addHandler(collector)
    try:
        rh_logging.setup("INFO", console=False, capture_warnings=True)
        warnings.warn("captured!", UserWarning, stacklevel=1)
    finally:
        logging.getLogger("py.warnings").removeHandler(collector)
    assert any("captured!" in r.getMessage() for r in collector.records)


def test_configure_logger_is_deprecated(terminal: None) -> None:
    with pytest.warns(DeprecationWarning):
        logger = rh_logging.configure_logger(logging.DEBUG, name="thirdparty")
    assert logger.level == logging.DEBUG
    assert logger.propagate is False
    assert isinstance(logger.handlers[0], RichHandler)


def test_plain_handler_when_stdout_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rh_logging, "_stream_is_terminal", lambda stream: False)
    logger = rh_logging.setup_module("INFO", name="thirdparty")
    (handler,) = logger.handlers
    assert type(handler) is logging.StreamHandler
    assert handler.formatter is not None and handler.formatter._fmt == rh_logging.DEFAULT_FORMAT
    # A Rich console given explicitly still gets Rich.
    from rich.console import Console

    logger = rh_logging.setup_module("INFO", name="thirdparty", color={"console": Console(width=200)})
    assert isinstance(logger.handlers[0], RichHandler)
    # setup()'s formatter replaces the plain stand-in's default format.
    formatter = logging.Formatter("CUSTOM %(message)s")
    rh_logging.setup("INFO", formatter=formatter)
    (console,) = logging.getLogger("rollouthub").handlers
    assert console.formatter is formatter


def test_plain_and_rich_handlers_write_the_same_message_text(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    message = "Finished rollout ro-1 [attempt at-1] in 0.12 s: reward=1.5 {'k': [1, 2]}"
    record = logging.LogRecord("rollouthub.runner", logging.INFO, __file__, 1, "%s", (message,), None)
    plain_out, rich_out = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stdout", plain_out)
    monkeypatch.setattr(rh_logging, "_stream_is_terminal", lambda stream: False)
    plain = rh_logging.setup_module("INFO", name="thirdparty").handlers[0]
    rich = rh_logging.setup_module(
        "INFO", name="thirdparty", color={"console": Console(file=rich_out, width=400, color_system=None)}
    ).handlers[0]
    plain.handle(record)
    rich.handle(record)
    assert plain_out.getvalue().rstrip("\n").endswith("   " + message)
    assert message in rich_out.getvalue()
