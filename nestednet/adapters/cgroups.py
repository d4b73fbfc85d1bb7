"""A process's cgroup memory, read from the kernel's files (no Docker involved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DROP_TIMEOUT_S = 10.0


def memory_cgroup(pid: int, proc: str = "/proc", cgroup: str = "/sys/fs/cgroup"
                  ) -> tuple[Path, bool] | None:
    """The directory of host process ``pid``'s memory cgroup and whether it is cgroup v1
    (whose files are named differently); None when ``pid`` is gone or has none."""
    try:
        lines = Path(f"{proc}/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = [ln.split(":", 2)[2] for ln in lines if ln.split(":", 2)[1] == "memory"]
    if v1:
        return Path(cgroup, "memory") / v1[0].lstrip("/"), True
    v2 = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")]
    if not v2:
        return None
    return Path(cgroup) / v2[0].lstrip("/"), False


def cgroup_memory(pid: int, proc: str = "/proc", cgroup: str = "/sys/fs/cgroup"
                  ) -> dict[str, int] | None:
    """Memory of the cgroup of host process ``pid`` and everything below it, in bytes.

    `used` follows `docker stats`: usage minus inactive file cache (reclaimable).
    Node parents start their children under their own cgroup, so a parent's figure
    covers its inner engine, OVS and all its components. ``proc`` and ``cgroup`` are
    where the host's are seen (the per-host helper has them bind-mounted elsewhere).
    """
    found = memory_cgroup(pid, proc, cgroup)
    return None if found is None else directory_memory(*found)


def directory_memory(base: Path, v1: bool) -> dict[str, int] | None:
    """cgroup_memory's figures for the memory cgroup directory ``base`` (and all below
    it), e.g. a container's found under another's; None when it cannot be read."""
    usage_file, prefix = ((base / "memory.usage_in_bytes", "total_") if v1
                          else (base / "memory.current", ""))
    try:
        usage = int(usage_file.read_text())
        stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines())
    except OSError:
        return None
    inactive = int(stat.get(f"{prefix}inactive_file", 0))
    anon = int(stat.get(f"{prefix}rss", stat.get("anon", 0)))
    return {"usage": usage, "used": usage - inactive, "anon": anon,
            "file": int(stat.get(f"{prefix}cache", stat.get("file", 0)))}


def swap_active(proc: str = "/proc") -> bool:
    """Whether any swap device or file is on (reclaim could then push anonymous pages
    out, which would understate what a cgroup holds)."""
    try:
        return len(Path(f"{proc}/swaps").read_text().strip().splitlines()) > 1
    except OSError:
        return True


def drop_cache(pid: int, proc: str = "/proc", cgroup: str = "/sys/fs/cgroup",
               timeout: float = DROP_TIMEOUT_S) -> bool:
    """Have the kernel reclaim what it can from host process ``pid``'s memory cgroup and
    all below it, so what stays is what the cgroup holds, not page cache it happened to
    read first (a shared file's pages are charged to whichever cgroup read them first).

    With no swap on, reclaim can only drop clean page cache and shrink reclaimable
    kernel caches; anonymous memory stays. So it refuses (False) when swap is on, and
    when the cgroup cannot be found or written. cgroup v1: `memory.force_empty` (which
    works on a cgroup with tasks); v2: `memory.reclaim`.

    Both loop in the kernel for as long as reclaim frees something, which on a cgroup
    whose processes keep touching files can be for ever (seen: 12 nodes with awake
    engines on one emulated host, minutes). So a child process writes the file and is
    killed after ``timeout`` seconds, which ends the loop; what was dropped by then
    stays dropped, and that counts as done.
    """
    if swap_active(proc):
        return False
    found = memory_cgroup(pid, proc, cgroup)
    if found is None:
        return False
    base, v1 = found
    path, value = ((base / "memory.force_empty", "0") if v1
                   else (base / "memory.reclaim", str(1 << 40)))
    if not path.exists():
        return False
    try:
        done = subprocess.run([sys.executable, "-c", _WRITE, str(path), value],
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return True
    return done.returncode == 0


_WRITE = """
import errno, sys
try:
    with open(sys.argv[1], "w") as f:
        f.write(sys.argv[2])
except OSError as exc:
    # memory.reclaim says EAGAIN when it freed less than asked, i.e. all it could.
    sys.exit(0 if exc.errno == errno.EAGAIN else 1)
"""


def oom_counter(pid: int, proc: str = "/proc", cgroup: str = "/sys/fs/cgroup") -> Path | None:
    """The file whose ``oom_kill`` line counts the OOM kills in host process ``pid``'s
    memory cgroup: memory.oom_control (v1, kernel 4.13 on) or memory.events (v2).

    A container's limit is its cgroup's, so this counts the kills of any process in it,
    its main one or one started by `docker exec`, whether or not Docker's engine is up
    to see them (a nested node's engine is parked most of the time). None when ``pid``
    is gone or its cgroup has no such file.
    """
    found = memory_cgroup(pid, proc, cgroup)
    if found is None:
        return None
    base, v1 = found
    path = base / ("memory.oom_control" if v1 else "memory.events")
    return path if path.exists() else None


def oom_kills(counter: Path) -> int | None:
    """The ``oom_kill`` count in an oom_counter file; None when it cannot be read (the
    cgroup is gone) or the kernel does not count (v1 before 4.13)."""
    try:
        text = counter.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return None
