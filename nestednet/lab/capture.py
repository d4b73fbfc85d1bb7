"""`nestednet capture` and the `capture` action: pcapng from the host side of iPHY ports.

Each iPHY's port on the main bridge is the host end of its veth, so every packet the
iPHY sends or receives on the inter-node net passes there: nothing runs or is
installed in the node. Many ports go to one file, one interface block each, named
``n1:iphy1``. While a run plays on the lab (nestednet.lab.runs.ScenarioClock), each
packet carries its scenario time as a pcapng packet comment (``scenario_time=12.345678``);
the timestamps themselves stay wall-clock time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from nestednet.adapters import netlink
from nestednet.adapters.capture import Capture
from nestednet.errors import UsageError
from nestednet.lab import designs, runs
from nestednet.lab.multihost import HostLinks
from nestednet.lab.nodes import Lab
from nestednet.lab.shaping import iphy_port
from nestednet.model import topology as topo

COMMENT_PREFIX = "scenario_time="


def ports(lab: Lab, specs: Sequence[str]) -> dict[str, str]:
    """Host interface -> label for ``n1:iphy1`` specs; UsageError for a bad one."""
    if not specs:
        raise UsageError("name at least one port: NODE:iphyN (e.g. n1:iphy1)")
    if isinstance(designs.of(lab.meta).links(lab.record), HostLinks):
        raise UsageError(f"lab {lab.record.lab} spans several hosts: capture works on a lab "
                         "of this host only")
    out: dict[str, str] = {}
    with netlink.route() as ipr:
        for spec in specs:
            node, sep, component = spec.partition(":")
            if not sep:
                raise UsageError(f"{spec}: expected NODE:iphyN (e.g. n1:iphy1)")
            number = lab.shape.check_node(node)
            index = lab.shape.check_component(component)
            if index == 0:
                raise UsageError(f"{spec}: the GNAB has no port on the main bridge; "
                                 "capture an iPHY")
            name = iphy_port(lab.record.lab, topo.Endpoint(number, index))
            if not netlink.exists(ipr, name):
                raise UsageError(f"{spec}: its host port {name} does not exist",
                                 hint=f"`nestednet status --lab {lab.record.lab}`")
            if name in out:
                raise UsageError(f"{spec} is named twice")
            out[name] = spec
    return out


def scenario_comment(t0_wall: float, speed: float) -> Callable[[float], str]:
    """A packet's comment: its scenario time, from the run's clock."""
    return lambda wall: f"{COMMENT_PREFIX}{(wall - t0_wall) * speed:.6f}"


def comment_of_run(lab: str) -> Callable[[float], str | None]:
    """The comment for a capture beside a run playing on ``lab`` now (no comment if none).

    The clock is read once, when the capture starts: a run started later is not seen."""
    clock = runs.ScenarioClock(lab).read()
    if clock is None:
        return lambda wall: None
    return scenario_comment(float(clock["t0_wall"]), float(clock["speed"]))


def capture(lab: Lab, specs: Sequence[str], path: Path, seconds: float | None,
            stop: threading.Event) -> dict:
    """Capture until ``seconds`` pass or ``stop`` is set; what was written."""
    names = ports(lab, specs)
    clock = runs.ScenarioClock(lab.record.lab).read()
    comment = comment_of_run(lab.record.lab)
    path.parent.mkdir(parents=True, exist_ok=True)
    running = Capture(names, path, comment)
    try:
        stop.wait(seconds)
    finally:
        packets = running.stop()
    return {"file": str(path), "ports": dict(names), "packets": packets,
            "scenario_time": "packet comment" if clock is not None else None}
