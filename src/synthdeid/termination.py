"""Stopping signals as an exception, so a stopped step cleans up after itself.

By default SIGTERM and SIGHUP end the process at once: no ``finally`` runs,
and the temporary files of :mod:`synthdeid.artifacts` (which may hold PHI)
stay behind. Inside :func:`signals_as_exceptions` these signals (and SIGINT)
raise :class:`Terminated` in the main thread instead; every ``finally`` and
context manager on the way out runs, and the caller exits with 128 + the
signal number, as a shell reports a process a signal ended.
"""

from __future__ import annotations

import signal
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


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    # later signals while the first one unwinds must not interrupt the cleanup
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signum)


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
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:  # an ignored signal (nohup) stays ignored
            signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
