"""One writer per lab: an flock on `<labs>/<lab>.lock`, beside the lab's record.

Every command that changes a lab (create, delete, link add/del, swap, run, cleanup)
holds it, so two of them never interleave: two `link add`s for one node pair run
one after the other and the second is refused by Algorithm 1's rule. The file sits
beside the record directory, not in it, so `create` can hold it before the
directory exists. The kernel drops an flock when its holder dies, so a crash never
leaves a lab locked, and a lock that can be taken means nobody is changing the lab.

The lock is re-entrant within a process (a `run` that creates its lab holds it once
for both), and the file says who holds it, for the message a waiter sees. A command
that waits gives up after ``WAIT_S``; a `run` holds its lab for the whole scenario,
and commands that find one there are refused at once (the CA owns the links then).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from nestednet.errors import UsageError
from nestednet.lab.record import LABS_DIR
from nestednet.model.topology import check_lab_name

WAIT_S = 60.0
RUN = "run"

_held: dict[str, tuple[int, int]] = {}
"""lab -> (file descriptor, depth) for the locks this process holds."""
_guard = threading.Lock()


def lock_path(lab: str, root: Path | None = None) -> Path:
    return (root or LABS_DIR) / f"{check_lab_name(lab)}.lock"


def holder(lab: str, root: Path | None = None) -> dict:
    """Who holds (or last held) the lab's lock: {"pid", "purpose"}, or {}."""
    try:
        return json.loads(lock_path(lab, root).read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        return {}


def _open_locked(path: Path) -> int | None:
    """An fd holding the flock on the file now at ``path`` (not on an unlinked one)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # removed by a delete while we waited: lock the new file


def _busy(lab: str, root: Path | None, waited: float) -> UsageError:
    who = holder(lab, root)
    what = f"`nestednet {who.get('purpose', '?')}` (pid {who.get('pid', '?')})"
    if who.get("purpose") == RUN:
        return UsageError(f"lab {lab} is playing a scenario: {what} owns its links until "
                          "it ends", hint="wait for the run to end, or stop it with Ctrl-C")
    return UsageError(f"lab {lab} is busy: {what} is changing it"
                      + (f" (waited {waited:.0f} s)" if waited else ""),
                      hint="try again when it is done")


@contextlib.contextmanager
def hold(lab: str, purpose: str, *, root: Path | None = None,
         wait: float = WAIT_S) -> Iterator[None]:
    """Hold the lab's lock inside the block; UsageError when another process keeps it.

    ``wait`` seconds at most (0: only try once). A lab held by a run is refused at once.
    """
    with _guard:
        if lab in _held:
            fd, depth = _held[lab]
            _held[lab] = (fd, depth + 1)
            reentered = True
        else:
            reentered = False
    if not reentered:
        fd = _acquire(lab, purpose, root, wait)
    try:
        yield
    finally:
        with _guard:
            fd, depth = _held[lab]
            if depth > 1:
                _held[lab] = (fd, depth - 1)
            else:
                del _held[lab]
                os.close(fd)


def _acquire(lab: str, purpose: str, root: Path | None, wait: float) -> int:
    path = lock_path(lab, root)
    deadline = time.monotonic() + wait
    while True:
        fd = _open_locked(path)
        if fd is not None:
            break
        if holder(lab, root).get("purpose") == RUN or time.monotonic() >= deadline:
            raise _busy(lab, root, wait)
        time.sleep(0.05)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "purpose": purpose}).encode(), 0)
    with _guard:
        _held[lab] = (fd, 1)
    return fd


def forget(lab: str, root: Path | None = None) -> None:
    """Remove the lock file of a deleted lab; the caller holds the lock."""
    with contextlib.suppress(FileNotFoundError):
        lock_path(lab, root).unlink()
