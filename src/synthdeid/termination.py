"""Stopping signals as an exception, so a stopped step cleans up after itself.

By default SIGTERM and SIGHUP end the process at once: no ``finally`` runs,
and the temporary files of :mod:`synthdeid.artifacts` (which may hold PHI)
stay behind. Inside :func:`signals_as_exceptions` these signals (and SIGINT)
raise :class:`Terminated` in the main thread instead; every ``finally`` and
context manager on the way out runs, and the caller exits with 128 + the
signal number, as a shell reports a process a signal ended.

Python drops an exception raised where it cannot propagate (a weakref
callback, ``__del__``, some import-machinery cleanup), and a signal can land
there. So the handler also records the signal, and :func:`raise_if_stopped`
raises it again at the points that matter: before an artifact is renamed into
place, and when a step returns. A stop is never lost to such a spot.

A few steps must not be cut in two: creating a temporary file and recording
its name, so the cleanup knows what to remove. Inside :func:`stops_deferred`
the handler only records the signal, and the stop is raised when the block
ends.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Terminated(BaseException):
    """The process received a stopping signal.

    A ``BaseException`` (like ``KeyboardInterrupt``), so ``except Exception``
    in a step does not swallow it.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.signal_name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_received: list[int] = []  # the stopping signal received inside signals_as_exceptions, if any
_deferring: list[None] = []  # one entry per open stops_deferred block


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    # later signals while the first one unwinds must not interrupt the cleanup
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    _received.append(signum)
    if not _deferring:
        raise Terminated(signum)


def _quiet_dropped_stop(unraisable: sys.UnraisableHookArgs) -> None:
    """Keep a dropped :class:`Terminated` out of stderr (it is raised again); report anything else."""
    if isinstance(unraisable.exc_value, Terminated):
        return
    sys.__unraisablehook__(unraisable)


def raise_if_stopped() -> None:
    """Raise :class:`Terminated` if a stopping signal arrived, even one whose exception was dropped."""
    if _received:
        raise Terminated(_received[0])


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Hold a stopping signal that arrives inside the block; raise it when the block ends.

    For the few statements that must run together (create a temporary file,
    record its name); keep the block short, it delays a stop. Blocks nest: the
    stop is raised when the outermost one ends.
    """
    _deferring.append(None)
    try:
        yield
    finally:
        _deferring.pop()
    if not _deferring:
        raise_if_stopped()


@contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """Turn SIGTERM, SIGHUP and SIGINT into :class:`Terminated`; restore the handlers after.

    A signal ignored on entry (``nohup``) stays ignored. Outside the main
    thread signal handlers cannot be set, and nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    previous_hook = sys.unraisablehook
    _received.clear()
    sys.unraisablehook = _quiet_dropped_stop
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:  # an ignored signal (nohup) stays ignored
            signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        sys.unraisablehook = previous_hook
        _received.clear()
