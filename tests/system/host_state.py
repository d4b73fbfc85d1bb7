"""Everything on this host that a lab could leave behind, as comparable text.

Links, OVS bridges and their flows, containers, volumes, network namespaces, tc
qdiscs and NestedNet's own files: two snapshots taken around a
crashed command and its `cleanup` must be equal. Observed with the system tools on
purpose (not through the code under test).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

STATE_ROOT = Path("/var/lib/nestednet/labs")


def _lines(*cmd: str) -> list[str]:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    return done.stdout.splitlines()


def _flows(bridge: str) -> list[str]:
    out = []
    for line in _lines("ovs-ofctl", "-O", "OpenFlow13", "dump-flows", bridge):
        line = re.sub(r"(duration|n_packets|n_bytes|idle_age|hard_age)=[^,]*, ?", "", line)
        out.append(f"flow {bridge} {line.strip()}")
    return out


def snapshot() -> set[str]:
    state = set()
    for line in _lines("ip", "-o", "link", "show"):
        state.add("link " + line.split(":")[1].strip().split("@")[0])
    state.update(f"netns {n.split()[0]}" for n in _lines("ip", "netns", "list") if n.strip())
    for bridge in _lines("ovs-vsctl", "list-br"):
        state.add(f"bridge {bridge}")
        state.update(_flows(bridge))
    state.update(f"container {c}" for c in _lines("docker", "ps", "-a", "--format",
                                                  "{{.Names}}"))
    state.update(f"volume {v}" for v in _lines("docker", "volume", "ls", "-q"))
    # Classes and filters live under a qdisc of an interface: listed with it above.
    state.update(f"tc {line.strip()}" for line in _lines("tc", "qdisc", "show") if line.strip())
    if STATE_ROOT.is_dir():
        state.update(f"file {p}" for p in STATE_ROOT.iterdir())
    return state


def difference(before: set[str], after: set[str]) -> dict[str, list[str]]:
    return {"left": sorted(after - before), "gone": sorted(before - after)}
