"""Ctrl-C while something must finish: hold SIGINT back, then act on it.

Rolling back a create or deleting a lab half-way leaves more behind than either
finishing it or not starting it, so those steps run with SIGINT deferred: a Ctrl-C
typed meanwhile is raised (as KeyboardInterrupt) once the step is done.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

_noted: list[bool] | None = None
"""SIGINTs seen by the outermost deferral under way (main thread only), else None."""


@contextlib.contextmanager
def deferred_sigint() -> Iterator[None]:
    """Inside, SIGINT is noted instead of raised; on leaving, a noted one is raised.

    Only the main thread can change signal handlers; elsewhere this does nothing
    (SIGINT is delivered to the main thread anyway).
    """
    global _noted
    if threading.current_thread() is not threading.main_thread() or _noted is not None:
        yield  # not ours to handle, or an outer deferral will raise it
        return
    noted = _noted = []
    previous = signal.signal(signal.SIGINT, lambda *_: noted.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _noted = None
    if noted:
        raise KeyboardInterrupt
