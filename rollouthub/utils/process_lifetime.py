"""One owner for every child process: children die with their parent, SIGTERM unwinds the parent like Ctrl+C.

* :func:`sigterm_raises` -- while active, SIGTERM raises :class:`Terminated` (a ``KeyboardInterrupt``) in the main
  thread, so every ``finally`` block and every Ctrl+C path (stopping runners, servers) also runs for ``kill <pid>``,
  ``docker stop``, a process manager or a CI cancel.
* :func:`quiet_interrupted_tasks` -- an event loop does not report, a second time and as a never-retrieved task
  exception, the interruption that ended one of its tasks (it propagates out of the loop and is reported once).
* :func:`die_with_parent` -- called in a child: when its parent is gone, the child gets SIGTERM (and so stops the
  graceful way). On Linux through the parent-death signal (``prctl(PR_SET_PDEATHSIG)``); everywhere through a watcher
  thread that waits for the parent's exit (a pidfd on Linux, kqueue on macOS/BSD; a poll every half second only
  where neither exists).
* :func:`start_owned` / :func:`stop_owned` -- start a command in its own process group (so a terminal's Ctrl+C
  reaches the owner only, which stops its children in order) and stop the whole group: SIGTERM, a bounded wait,
  then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence

__all__ = [
    "Terminated",
    "die_with_parent",
    "exit_code_of",
    "quiet_interrupted_tasks",
    "set_parent_death_signal",
    "sigterm_raises",
    "start_owned",
    "stop_owned",
    "wait_for_pid_exit",
]

_PR_SET_PDEATHSIG = 1
_PARENT_POLL_SECONDS = 0.5


class Terminated(KeyboardInterrupt):
    """SIGTERM received (raised in the main thread by :func:`sigterm_raises`); handled wherever Ctrl+C is."""

    signum = int(signal.SIGTERM)


def exit_code_of(interruption: BaseException) -> int:
    """The shell's exit code for a run stopped by ``interruption``: 143 for SIGTERM, 130 for SIGINT (Ctrl+C)."""
    return 128 + (Terminated.signum if isinstance(interruption, Terminated) else int(signal.SIGINT))


@contextlib.contextmanager
def sigterm_raises(only_if_default: bool = False) -> Iterator[None]:
    """While active, SIGTERM raises :class:`Terminated` in the main thread (outside it: does nothing).

    With ``only_if_default``, only when SIGTERM has its default action (a handler somebody installed stays).

    Python drops an exception raised while it runs a finaliser or a weak-reference callback ("Exception ignored
    in ..."), so a SIGTERM landing there would be lost. While active, such a dropped :class:`Terminated` is caught
    through ``sys.unraisablehook`` (other reports go to the previous hook) and raised again when the body ends
    without an exception: a terminated run never reports success.

    Some libraries turn any exception raised inside them into their own error (pydantic-core reports a
    ``KeyboardInterrupt`` raised while it builds a serializer as a ``SchemaError``), so a SIGTERM landing there would
    end the body with an unrelated failure. When the body ends with an exception that is not a ``KeyboardInterrupt``
    after SIGTERM arrived, the :class:`Terminated` is raised instead, from that exception: a terminated run exits as
    one, whatever the signal interrupted.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if only_if_default and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    received: List[Terminated] = []
    dropped: List[BaseException] = []
    previous_hook = sys.unraisablehook

    def handler(signum: int, frame: Any) -> None:
        terminated = Terminated(f"signal {signum} (SIGTERM)")
        received.append(terminated)
        raise terminated

    def unraisable_hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, Terminated):
            dropped.append(unraisable.exc_value)
        else:
            previous_hook(unraisable)

    previous = signal.signal(signal.SIGTERM, handler)
    sys.unraisablehook = unraisable_hook
    try:
        try:
            yield
        except Exception as failure:
            if received:  # the handler's exception was turned into another error by a library (see above)
                raise received[0] from failure
            raise
        if dropped:  # the handler's exception was dropped by the interpreter (see above)
            raise dropped[0]
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)


def quiet_interrupted_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Make ``loop`` drop the reports of tasks ended by an interruption (Ctrl+C, or SIGTERM under
    :func:`sigterm_raises`); other reports go to the loop's default handler.

    A ``KeyboardInterrupt`` raised while some library's helper task runs (an HTTP client writing a request body, say)
    ends that task *and* propagates out of the loop to the code that handles the interruption; without this, the
    task is reported again when it is collected ("Task exception was never retrieved"), after the run's own message.
    """

    def handler(loop: asyncio.AbstractEventLoop, context: Dict[str, Any]) -> None:
        if isinstance(context.get("exception"), KeyboardInterrupt):
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Linux: ask the kernel to send ``sig`` to this process when the thread that started it exits.

    Returns whether it was set (``False`` on other systems). Call it first thing in the child, then check that the
    parent is still there (it may have died before the call).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return bool(libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by somebody else
        return True
    return True


def wait_for_pid_exit(pid: int, timeout: Optional[float] = None) -> bool:
    """Block until process ``pid`` (not necessarily a child) has exited; returns whether it did within ``timeout``.

    Waits on a pidfd (Linux) or kqueue (macOS/BSD); polls every half second only where neither exists.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except ProcessLookupError:
            return True
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                readable, _, _ = select.select([fd], [], [], timeout)
                return bool(readable)
            finally:
                os.close(fd)
    kqueue = getattr(select, "kqueue", None)
    if kqueue is not None:
        queue = kqueue()
        try:
            kq: Any = select  # the kqueue names exist only where kqueue does
            event = kq.kevent(pid, filter=kq.KQ_FILTER_PROC, flags=kq.KQ_EV_ADD, fflags=kq.KQ_NOTE_EXIT)
            try:
                return bool(queue.control([event], 1, timeout))
            except ProcessLookupError:
                return True
        finally:
            queue.close()
    deadline = None if timeout is None else time.monotonic() + timeout
    while _pid_alive(pid):
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(_PARENT_POLL_SECONDS)
    return True


def die_with_parent(parent_pid: Optional[int] = None, sig: int = signal.SIGTERM) -> None:
    """Make this process receive ``sig`` when ``parent_pid`` (default: the current parent) exits.

    A daemon thread waits for the parent's exit. Without ``parent_pid``, the kernel's parent-death signal is set too
    where the system has one (Linux; it fires when the *thread* that started this process ends, so pass the parent's
    pid, taken before the fork, when that thread may end first). If the parent is already gone, ``sig`` is sent at once.
    """
    parent = os.getppid() if parent_pid is None else parent_pid
    if parent_pid is None:  # the kernel's signal follows the thread that forked us: only for a forked child
        set_parent_death_signal(sig)

    def watch() -> None:
        wait_for_pid_exit(parent)
        os.kill(os.getpid(), sig)

    if not _pid_alive(parent) or (parent_pid is None and os.getppid() != parent):
        os.kill(os.getpid(), sig)
        return
    threading.Thread(target=watch, name=f"parent-{parent}-watcher", daemon=True).start()


def start_owned(cmd: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in a new process group (its own session) for :func:`stop_owned` to stop as a whole.

    A terminal's Ctrl+C then reaches only the owner; the owner stops the group. Pass the owner's pid to the child
    (e.g. ``--parent-pid``) so that it also stops when the owner is killed.
    """
    return subprocess.Popen(list(cmd), start_new_session=True, **popen_kwargs)


def _signal_group(process: subprocess.Popen[Any], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def stop_owned(process: subprocess.Popen[Any], timeout: float = 15.0, kill_timeout: float = 5.0) -> Optional[int]:
    """Stop a process started by :func:`start_owned` and everything in its group: SIGTERM, wait up to ``timeout``,
    then SIGKILL. Returns the process's exit code (``None`` if it survived SIGKILL)."""
    if process.poll() is None:
        _signal_group(process, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)
    # The leader may be gone while members of its group are not (e.g. forked workers): finish them too.
    _signal_group(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(kill_timeout)
    return process.returncode
