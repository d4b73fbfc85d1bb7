"""Memory of host processes, read from /proc: PSS per process tree.

PSS (proportional set size) splits shared pages between the processes sharing
them, so summing it over a node's daemons does not count the shared libraries of
every node in full; cgroup figures (nestednet.adapters.cgroups.cgroup_memory) give the
whole-node totals.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from nestednet.adapters.ovsdb import HOST_RUNDIR


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    comm: str


def processes() -> dict[int, Proc]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            found[int(entry)] = Proc(int(entry), ppid, comm)
    return found


def descendants(root: int, procs: dict[int, Proc]) -> list[Proc]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in procs:
            out.append(procs[pid])
        todo.extend(children.get(pid, []))
    return out


def pss_kb(pid: int, field: str = "Pss") -> int:
    """PSS of one process in kB (0 when it is gone); ``field`` Pss_Anon or Pss_File for
    its private-memory or file-backed (binaries, shared between nodes) part."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    return 0


def pss_mb(procs: list[Proc], field: str = "Pss") -> float:
    return round(sum(pss_kb(p.pid, field) for p in procs) / 1024, 2)


def matching(procs: list[Proc], prefixes: tuple[str, ...]) -> list[Proc]:
    return [p for p in procs if p.comm.startswith(prefixes)]


INNER_DAEMON = ("dockerd", "containerd")
"""The inner engine: dockerd, containerd and containerd-shim* (comm is cut at 15 chars)."""
OVS_DAEMONS = ("ovs-vswitchd", "ovsdb-server")


def host_ovs_pids() -> list[int]:
    pids = []
    for name in ("ovs-vswitchd", "ovsdb-server"):
        with contextlib.suppress(OSError, ValueError):
            pids.append(int(Path(HOST_RUNDIR, f"{name}.pid").read_text().strip()))
    return pids


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def cpu_cgroup(pid: int) -> tuple[Path, bool] | None:
    """The directory of host process ``pid``'s CPU accounting cgroup and whether it is
    cgroup v1 (cpuacct; preferred where a hybrid system has both); None when it has
    none."""
    lines = [line.split(":", 2) for line in
             Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    for _, controllers, path in lines:
        if "cpuacct" in controllers.split(","):
            return Path(f"/sys/fs/cgroup/{controllers}") / path.lstrip("/"), True
    for _, controllers, path in lines:
        if controllers == "":
            return Path("/sys/fs/cgroup") / path.lstrip("/"), False
    return None


def cgroup_dir_cpu_s(directory: Path, v1: bool) -> float:
    """CPU seconds used so far by the cgroup at ``directory`` and all below it."""
    if v1:
        return int((directory / "cpuacct.usage").read_text()) / 1e9
    return int((directory / "cpu.stat").read_text().split()[1]) / 1e6


def cgroup_cpu_s(pid: int) -> float:
    """CPU seconds used so far by the cgroup of host process ``pid`` (a node parent;
    v1 cpuacct or v2 cpu.stat)."""
    found = cpu_cgroup(pid)
    return cgroup_dir_cpu_s(*found) if found else 0.0
