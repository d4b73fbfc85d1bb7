"""A process's cgroup memory, read from the kernel's files (no Docker involved)."""

from __future__ import annotations

from pathlib import Path


def cgroup_memory(pid: int, proc: str = "/proc", cgroup: str = "/sys/fs/cgroup"
                  ) -> dict[str, int] | None:
    """Memory of the cgroup of host process ``pid`` and everything below it, in bytes.

    `used` follows `docker stats`: usage minus inactive file cache (reclaimable).
    Node parents start their children under their own cgroup, so a parent's figure
    covers its inner engine, OVS and all its components. ``proc`` and ``cgroup`` are
    where the host's are seen (the per-host helper has them bind-mounted elsewhere).
    """
    try:
        lines = Path(f"{proc}/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    v1 = [ln.split(":", 2)[2] for ln in lines if ln.split(":", 2)[1] == "memory"]
    if v1:
        base = Path(cgroup, "memory") / v1[0].lstrip("/")
        usage_file, prefix = base / "memory.usage_in_bytes", "total_"
    else:
        v2 = [ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")]
        if not v2:
            return None
        base = Path(cgroup) / v2[0].lstrip("/")
        usage_file, prefix = base / "memory.current", ""
    try:
        usage = int(usage_file.read_text())
        stat = dict(line.split() for line in (base / "memory.stat").read_text().splitlines())
    except OSError:
        return None
    inactive = int(stat.get(f"{prefix}inactive_file", 0))
    anon = int(stat.get(f"{prefix}rss", stat.get("anon", 0)))
    return {"usage": usage, "used": usage - inactive, "anon": anon,
            "file": int(stat.get(f"{prefix}cache", stat.get("file", 0)))}
