"""Running a study's independent points in local worker processes.

``in_processes(fn, args, workers, done)`` calls ``fn(*a)`` for every ``a`` in ``args`` on
``workers`` processes and hands each result to ``done(i, result)`` as it arrives (results
are kept by index by the caller, so the order they finish in never shows). On any exception
or interrupt (Ctrl-C, SIGTERM) the points not started are cancelled and the workers are
terminated at once, so an interrupted study exits promptly instead of finishing the points
still queued. The workers ignore Ctrl-C themselves (the terminal sends it to the whole
process group; the parent stops them) and die quietly when terminated, so an interrupt
prints the one line ``sim.cli`` writes and no worker tracebacks; on Linux they are also
terminated when the parent dies without cleaning up (``kill -9``, the OOM killer).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence


def _quiet_worker(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not sim.cli's handler, inherited by fork
    _die_with_parent(parent)


def _die_with_parent(parent: int) -> None:
    """On Linux, ask for SIGTERM when the parent (pid ``parent``) dies -- a parent killed
    outright cannot terminate its workers -- and leave at once if it already has."""
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took hold
        os._exit(1)


def in_processes(fn: Callable, args: Sequence[tuple], workers: int,
                 done: Callable[[int, object], None], context=None,
                 poll: Callable[[], None] | None = None,
                 meanwhile: Callable[[], None] | None = None) -> None:
    """Run ``fn`` over ``args`` on ``workers`` processes, calling ``done(i, result)``.

    ``context``: a ``multiprocessing`` context (e.g. ``fork``, for work the workers inherit
    instead of receiving it pickled); ``poll()``, if given, is called every 0.1 s while
    waiting (e.g. to relay the workers' progress); ``meanwhile()``, if given, once here
    after the work is handed out (e.g. imports the caller needs next: the parent would
    only wait)."""
    import os
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, as_completed, wait

    pool = ProcessPoolExecutor(max_workers=workers, initializer=_quiet_worker,
                               initargs=(os.getpid(),), mp_context=context)
    try:
        futures = {pool.submit(fn, *a): i for i, a in enumerate(args)}
        if meanwhile is not None:
            meanwhile()
        if poll is None:
            for fut in as_completed(futures):
                done(futures[fut], fut.result())
        else:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.1, return_when=FIRST_COMPLETED)
                poll()
                for fut in finished:
                    done(futures[fut], fut.result())
    except BaseException:
        # ProcessPoolExecutor has no public way to stop running workers: terminate them
        procs = list(getattr(pool, "_processes", {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.terminate()
        for proc in procs:  # gone before the caller cleans up what they were writing
            proc.join(timeout=10)
        # Let the pool's manager thread see its workers gone and close its wakeup pipe now:
        # left running, it races the interpreter's exit handler, which then writes to the
        # pipe as it closes ("Exception ignored in: <module 'threading'>" on stderr).
        if manager is not None:
            manager.join(timeout=10)
        raise
    pool.shutdown()


_INHERITED: tuple | None = None  # (fn, items) the forked workers of ``forked`` call


def _call_inherited(i: int):
    fn, items = _INHERITED
    return fn(items[i])


def can_fork(workers: int, n: int) -> bool:
    """Whether ``forked`` runs ``n`` items on ``workers`` processes here: Linux (fork), more
    than one worker and more than one item; otherwise the caller runs them itself."""
    import sys

    return workers >= 2 and n >= 2 and sys.platform.startswith("linux")


def forked(fn: Callable, items: Sequence, workers: int,
           poll: Callable[[], None] | None = None,
           meanwhile: Callable[[], None] | None = None) -> list:
    """``[fn(item) for item in items]`` on up to ``workers`` forked processes: the workers
    inherit ``fn`` and ``items`` (closures, open figures, anything that cannot be pickled)
    and only the results travel back, kept in order. ``poll`` and ``meanwhile`` as in
    ``in_processes``. Only where ``can_fork`` says so."""
    import multiprocessing as mp

    global _INHERITED
    results: list = [None] * len(items)

    def done(i: int, res) -> None:
        results[i] = res

    _INHERITED = (fn, items)
    try:
        in_processes(_call_inherited, [(i,) for i in range(len(items))],
                     min(workers, len(items)), done, context=mp.get_context("fork"),
                     poll=poll, meanwhile=meanwhile)
    finally:
        _INHERITED = None
    return results
