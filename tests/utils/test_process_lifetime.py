"""``rollouthub.utils.process_lifetime``: real processes, real signals, waits on conditions (never sleeps)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest

from rollouthub.utils.process_lifetime import (
    Terminated,
    exit_code_of,
    sigterm_raises,
    start_owned,
    stop_owned,
    wait_for_pid_exit,
)


def _wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_sigterm_raises_terminated_so_finally_blocks_run() -> None:
    code = textwrap.dedent(
        """
        import os, signal, sys
        from rollouthub.utils.process_lifetime import Terminated, exit_code_of, sigterm_raises
        with sigterm_raises():
            try:
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                    signal.pause()
                finally:
                    print("finally ran", flush=True)
            except KeyboardInterrupt as exc:  # Terminated is one: every Ctrl+C path also handles SIGTERM
                print(type(exc).__name__, exit_code_of(exc), flush=True)
                sys.exit(exit_code_of(exc))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.returncode == 143, result.stderr
    assert result.stdout.split("\n")[:2] == ["finally ran", "Terminated 143"]
    assert exit_code_of(KeyboardInterrupt()) == 130 and exit_code_of(Terminated()) == 143


def test_a_sigterm_dropped_inside_a_finaliser_is_raised_when_the_block_ends() -> None:
    # Python drops an exception raised in a finaliser ("Exception ignored in ..."): the SIGTERM must not be lost.
    code = textwrap.dedent(
        """
        import os, signal, sys
        from rollouthub.utils.process_lifetime import exit_code_of, sigterm_raises

        class SignalledWhileFinalised:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs here, inside the finaliser, and its exception is dropped
                    pass

        try:
            with sigterm_raises():
                SignalledWhileFinalised()
                print("body finished", flush=True)
        except KeyboardInterrupt as exc:
            print(type(exc).__name__, flush=True)
            sys.exit(exit_code_of(exc))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.returncode == 143, (result.stdout, result.stderr)
    assert result.stdout.split("\n")[:2] == ["body finished", "Terminated"]
    assert "Exception ignored" not in result.stderr


def test_a_sigterm_a_library_turned_into_its_own_error_still_ends_the_block_as_terminated() -> None:
    # pydantic-core reports an exception raised while it builds a serializer as a SchemaError: the quickstart,
    # signalled during such an import, once exited 1 with a traceback instead of 143 with its one line.
    code = textwrap.dedent(
        """
        import os, signal, sys, time
        from rollouthub.utils.process_lifetime import exit_code_of, sigterm_raises

        def library_call():  # like pydantic-core: whatever goes wrong inside becomes the library's own error
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:  # the handler runs here
                    time.sleep(0.01)
            except BaseException as exc:
                raise RuntimeError(f"Error building serializer: {exc}") from exc

        try:
            with sigterm_raises():
                library_call()
        except KeyboardInterrupt as exc:
            print(type(exc).__name__, type(exc.__cause__).__name__, flush=True)
            sys.exit(exit_code_of(exc))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert result.returncode == 143, (result.stdout, result.stderr)
    assert result.stdout.split("\n")[0] == "Terminated RuntimeError"


def test_an_error_without_a_sigterm_passes_through_unchanged() -> None:
    with pytest.raises(ValueError, match="plain failure"):
        with sigterm_raises():
            raise ValueError("plain failure")


def test_sigterm_raises_restores_the_previous_handler_and_respects_a_custom_one() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_raises():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before

    def custom(signum: int, frame: object) -> None:
        pass

    signal.signal(signal.SIGTERM, custom)
    try:
        with sigterm_raises(only_if_default=True):
            assert signal.getsignal(signal.SIGTERM) is custom
    finally:
        signal.signal(signal.SIGTERM, before)


def test_wait_for_pid_exit_waits_for_a_process_that_is_not_a_child() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert wait_for_pid_exit(sleeper.pid, timeout=0.2) is False
        sleeper.terminate()
        sleeper.wait(10)
        assert wait_for_pid_exit(sleeper.pid, timeout=5) is True
    finally:
        sleeper.kill()


@pytest.mark.parametrize("explicit_pid", [False, True])
def test_a_child_stops_when_its_parent_is_killed(tmp_path: Path, explicit_pid: bool) -> None:
    """A parent (SIGKILLed: no clean-up of its own) leaves no child: the child gets SIGTERM and stops cleanly."""
    marker = tmp_path / "child-cleaned-up"
    child = textwrap.dedent(
        f"""
        import os, signal, sys
        from rollouthub.utils.process_lifetime import die_with_parent, sigterm_raises
        with sigterm_raises():
            try:
                die_with_parent({"int(sys.argv[1])" if explicit_pid else ""})
                print(os.getpid(), flush=True)
                signal.pause()
            except KeyboardInterrupt:
                open({str(marker)!r}, "w").close()
        """
    )
    parent = textwrap.dedent(
        f"""
        import os, subprocess, sys, signal
        child = subprocess.Popen([sys.executable, "-c", {child!r}, str(os.getpid())], stdout=subprocess.PIPE)
        print(child.stdout.readline().decode().strip(), flush=True)
        signal.pause()
        """
    )
    process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(process.stdout.readline())  # type: ignore[union-attr]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        _wait_until(lambda: _gone(child_pid), 10, "the orphaned child to stop")
        _wait_until(marker.exists, 5, "the child's clean-up")
    finally:
        process.kill()


def test_stop_owned_stops_the_whole_group_even_a_child_that_ignores_sigterm() -> None:
    code = textwrap.dedent(
        """
        import signal, subprocess, sys
        grandchild = subprocess.Popen(
            [sys.executable, "-c", "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.pause()"]
        )
        print(grandchild.pid, flush=True)
        signal.pause()
        """
    )
    process = start_owned([sys.executable, "-c", code], stdout=subprocess.PIPE)
    grandchild = int(process.stdout.readline())  # type: ignore[union-attr]
    started = time.monotonic()
    assert stop_owned(process, timeout=10, kill_timeout=5) == -signal.SIGTERM
    _wait_until(lambda: _gone(grandchild), 10, "the grandchild to be killed")
    assert time.monotonic() - started < 10


def test_a_loop_does_not_report_tasks_an_interruption_ended_but_reports_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio

    from rollouthub.utils.process_lifetime import Terminated, quiet_interrupted_tasks

    loop = asyncio.new_event_loop()
    try:
        quiet_interrupted_tasks(loop)
        with caplog.at_level("ERROR", logger="asyncio"):
            for error in (Terminated("signal 15 (SIGTERM)"), KeyboardInterrupt(), ValueError("a real failure")):
                loop.call_exception_handler({"message": "Task exception was never retrieved", "exception": error})
    finally:
        loop.close()
    reported = [record for record in caplog.records if record.name == "asyncio"]
    assert len(reported) == 1 and "a real failure" in caplog.text and "SIGTERM" not in caplog.text
