"""Runs jobs side by side: each in a child process forked from the run, at most `jobs` at a time.

Forking after the imports means each child starts with NumPy, SciPy, Matplotlib and every topic
module already loaded (imports are paid once per run) and ends by handing its memory back. The
longest jobs (by the wall times of the previous run) start first, so the slowest one does not
finish alone at the end. Every job computes with a single BLAS thread, whether it runs beside
others or alone, so its results are the same bytes either way. For each job the parent records
wall time, CPU time and the child's peak resident memory (from wait4).

An exception in a child is sent back and raised again in the parent, with the child's traceback
as a note; an interrupt (Ctrl-C reaches the whole process group) stops every child, and each
child's own cleanup leaves the cache as it was (a child stopped alone, by a SIGINT or SIGTERM
sent to it only, is an interrupt of the run too, whose `worker` names its job). A child that ends
without a result (killed by a signal, such as the out-of-memory killer's SIGKILL or a crash's
SIGSEGV) is a `WorkerDied` naming its job and the signal. A child never returns into the parent's code
(signals are blocked across the fork and every way out of the child ends in `os._exit`), so
only the parent runs the run's cleanup and releases its lock; on Linux each child also asks
the kernel for SIGTERM when its parent dies, so no worker outlives a killed run.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass

BLAS_THREADS = 1
STOPS = {signal.SIGINT, signal.SIGTERM}
"""The signals that stop a run: blocked while a child is forked, until it has set itself up."""
PR_SET_PDEATHSIG = 1


class WorkerDied(RuntimeError):
    """A child that ended without a result: killed by a signal (SIGKILL, SIGSEGV, …) or exited early."""


@dataclass(frozen=True)
class Measure:
    """What one job cost: wall seconds, CPU seconds (user + system) and peak resident memory in MB."""

    wall: float
    cpu: float
    peak_mb: float


@contextmanager
def blas_threads(threads: int = BLAS_THREADS):
    """Limit BLAS (and OpenMP) to `threads` threads; runs use one: identical floating-point results however jobs
    are scheduled (a check of the numerical contract recomputes with more, which sum in another order)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads):
        yield


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_all(tasks: Iterable[tuple[str, Callable[[], object]]], jobs: int,
            on_done: Callable[[str, object, Measure], None], prelude: Callable[[], None] | None = None,
            threads: int = BLAS_THREADS) -> None:
    """Run each (label, task) in its own forked child, at most `jobs` at once, in the given order;
    `on_done(label, value, measure)` is called in the parent as each one finishes.

    `prelude`, if given, runs in the parent once the first child has started (beside it, on another core):
    whatever it loads is inherited by every later child. Each child computes with `threads` BLAS threads."""
    queue = list(tasks)
    running: dict[int, tuple[str, int, float]] = {}  # pid -> (label, read end of its pipe, start)
    # The limit is set once, here, and every child inherits it with the library's state at fork: no child
    # spends its own CPU time finding the BLAS libraries.
    with blas_threads(threads):
        _schedule(queue, running, jobs, on_done, prelude)


def _schedule(queue, running, jobs, on_done, prelude) -> None:
    try:
        if queue and prelude is not None:
            _launch(queue, running)
            prelude()
        while queue or running:
            while queue and len(running) < max(1, jobs):
                _launch(queue, running)
            _collect(running, on_done)
    except BaseException:
        for pid, (_, fd, _) in running.items():
            _stop(pid, fd)
        raise


def _launch(queue: list, running: dict) -> None:
    """Fork a child for the next task of the queue and record it as running."""
    label, task = queue.pop(0)
    pid, fd = _start(task)
    running[pid] = (label, fd, time.perf_counter())


def _start(task: Callable[[], object]) -> tuple[int, int]:
    read, write = os.pipe()
    parent = os.getpid()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        pid = os.fork()
        if pid == 0:
            _child(task, read, write, parent, mask)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    os.close(write)
    return pid, read


def _child(task: Callable[[], object], read: int, write: int, parent: int, mask) -> None:
    """Run `task` and send (ok, value or exception, traceback) to the parent; whatever happens, even an
    interrupt while sending, the child ends here with os._exit and never runs the parent's cleanup."""
    code = 1
    try:
        os.close(read)
        _die_with(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        try:
            message, code = (True, task(), None), 0
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            message = (False, exc, traceback.format_exc())
        try:
            payload = pickle.dumps(message)
        except Exception as exc:  # an exception that cannot be pickled: send its text
            payload = pickle.dumps((False, RuntimeError(f"{type(message[1]).__name__}: {message[1]}"),
                                    message[2] or repr(exc)))
        with os.fdopen(write, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(code)


def _die_with(parent: int) -> None:
    """Have the kernel send this child SIGTERM when its parent dies (Linux's PR_SET_PDEATHSIG), so that no
    worker outlives a killed run; exit at once if the parent is already gone."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def _collect(running: dict[int, tuple[str, int, float]], on_done) -> None:
    """Wait until at least one child has sent its result and exited; hand each finished one to on_done."""
    fds = {fd: pid for pid, (_, fd, _) in running.items()}
    ready, _, _ = select.select(list(fds), [], [])
    for fd in ready:
        pid = fds[fd]
        label, _, start = running.pop(pid)
        with os.fdopen(fd, "rb") as pipe:
            payload = pipe.read()
        _, status, usage = os.wait4(pid, 0)
        measure = Measure(time.perf_counter() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
        if not payload:
            raise WorkerDied(f"{label}: its worker died ({_describe(status)}) without a result")
        ok, value, child_traceback = pickle.loads(payload)
        if not ok and isinstance(value, KeyboardInterrupt):  # SIGINT or SIGTERM reached this child alone
            value.worker = label
        if not ok:
            if child_traceback and hasattr(value, "add_note"):
                value.add_note(f"in the worker that ran {label}:\n{child_traceback}")
            raise value
        on_done(label, value, measure)


def _stop(pid: int, fd: int) -> None:
    try:
        os.kill(pid, signal.SIGINT)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass
    os.close(fd)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        name = signal.Signals(number).name if number in signal.valid_signals() else f"signal {number}"
        return f"killed by {name}" + (", as the out-of-memory killer does" if number == signal.SIGKILL else "")
    return f"exit code {os.waitstatus_to_exitcode(status)}"
