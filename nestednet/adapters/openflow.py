"""OpenFlow rules on a host OVS bridge, in batches, through `ovs-ofctl`.

Neither python-ovs nor ovsdbapp speaks OpenFlow (they speak OVSDB), so flows go
through `ovs-ofctl --bundle add-flows BRIDGE -`: one process per batch, any number
of adds and deletes applied atomically (about 9 ms per call here), which is what
the CA needs for a whole step at once. Every flow carries a cookie naming what it
belongs to, so removal deletes exactly those flows and nothing else.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from nestednet.errors import EnvironmentProblem

PROTOCOL = "OpenFlow13"
LINK_PRIORITY = 100


@dataclass(frozen=True)
class Flow:
    cookie: int
    in_port: int
    output: int
    priority: int


def _ofctl() -> str:
    path = shutil.which("ovs-ofctl")
    if path is None:
        raise EnvironmentProblem("ovs-ofctl not found", hint="apt-get install openvswitch-switch")
    return path


def patch_lines(cookie: int, a: int, b: int) -> list[str]:
    """The flow pair that joins ports a and b both ways."""
    return [f"add cookie={cookie:#x},priority={LINK_PRIORITY},in_port={a},actions=output:{b}",
            f"add cookie={cookie:#x},priority={LINK_PRIORITY},in_port={b},actions=output:{a}"]


def delete_line(cookie: int) -> str:
    return f"delete cookie={cookie:#x}/-1"


def apply(bridge: str, lines: list[str]) -> None:
    """Apply add/delete lines to ``bridge`` as one atomic bundle."""
    if not lines:
        return
    done = subprocess.run([_ofctl(), "-O", PROTOCOL, "--bundle", "add-flows", bridge, "-"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvironmentProblem(f"ovs-ofctl on {bridge} failed: {done.stderr.strip()[:300]}")


_FLOW_RE = re.compile(r"cookie=(0x[0-9a-f]+).*?priority=(\d+),in_port=\"?(\d+)\"?"
                      r".*actions=output:\"?(\d+)\"?")


def dump(bridge: str) -> list[Flow]:
    """Every port-to-port flow on ``bridge`` (others are ignored)."""
    done = subprocess.run([_ofctl(), "-O", PROTOCOL, "--no-names", "dump-flows", bridge],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvironmentProblem(f"ovs-ofctl dump-flows {bridge} failed: "
                                 f"{done.stderr.strip()[:300]}")
    flows = []
    for line in done.stdout.splitlines():
        match = _FLOW_RE.search(line)
        if match:
            cookie, priority, in_port, output = match.groups()
            flows.append(Flow(int(cookie, 16), int(in_port), int(output), int(priority)))
    return flows
