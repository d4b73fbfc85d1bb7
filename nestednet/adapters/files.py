"""Files and directories NestedNet makes for root alone (issue #33, section 5).

Its state (labs, runs, linkemu, a host's parents) lives under /var/lib/nestednet, which
is made 0700 with every directory NestedNet makes there; files it writes are 0600. An
output a user names (`run --events FILE`, `--plot DIR`) may sit in a directory someone
else can write: it is opened without following a symbolic link planted at its name
(O_NOFOLLOW), and a file NestedNet makes anew fails if something is already there
(O_EXCL), so root never writes through another user's link.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import IO

STATE_ROOT = Path("/var/lib/nestednet")


def private_dir(path: str | Path) -> Path:
    """``path`` made (with its parents) and set to 0700; /var/lib/nestednet as well when
    ``path`` is below it."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    with contextlib.suppress(ValueError, OSError):
        path.resolve().relative_to(STATE_ROOT)
        os.chmod(STATE_ROOT, 0o700)
    return path


def open_private(path: str | Path, *, append: bool = False, binary: bool = True) -> IO:
    """``path`` for writing, 0600 when made, never through a symbolic link at ``path``:
    appended to, or truncated."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | \
        (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o600)
    return os.fdopen(fd, ("a" if append else "w") + ("b" if binary else ""),
                     **({} if binary else {"buffering": 1}))


def create_new(path: str | Path) -> IO[bytes]:
    """A file made anew at ``path`` (0600): FileExistsError if anything is there, a
    symbolic link included."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    return os.fdopen(fd, "wb")


def write_private(path: str | Path, text: str) -> None:
    """``text`` replaces ``path`` atomically (a new 0600 file renamed over it)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    with create_new(tmp) as f:
        f.write(text.encode())
    os.replace(tmp, path)


def restrict_socket(path: str | Path) -> None:
    """The unix socket at ``path`` made root:root 0600, refused if ``path`` is anything
    else (a link planted there is not followed: the change goes through an O_PATH
    descriptor of the name itself)."""
    fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a unix socket")
        os.chown(f"/proc/self/fd/{fd}", 0, 0)
        os.chmod(f"/proc/self/fd/{fd}", 0o600)
    finally:
        os.close(fd)


def replace_privately(path: str | Path, write) -> None:
    """``path`` replaced by what ``write(file)`` writes: a new 0600 file beside it
    (O_EXCL, O_NOFOLLOW) renamed over it, so a link planted at ``path`` is replaced,
    not written through."""
    path = Path(path)
    for attempt in range(100):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{attempt}.tmp")
        try:
            f = create_new(tmp)
        except FileExistsError:
            continue
        try:
            with f:
                write(f)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        return
    raise FileExistsError(f"no free temporary name beside {path}")
