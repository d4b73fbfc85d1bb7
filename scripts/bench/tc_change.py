#!/usr/bin/env python3
"""Benchmark one step's in-place HTB rate changes: time per class change, three ways.

A step of a 48-node x 4-iPHY run changes the rate of up to ~96 link directions, one
HTB class each (nestednet.lab.shaping). This builds that many filterless port trees
(tcplan.port_tree_ops, rate-only) on veth ports in a namespace of its own, then
changes every leaf's rate, --repeats times per method, alternating two rates so each
change is real:

* ``pyroute2``: pyroute2's ``IPRoute.tc("change-class")``, one request and ACK per
  class, rate tables (RTAB/CTAB) computed in Python (the executor's old `tc.change`);
* ``pyroute2-batch``: the same requests encoded by pyroute2 (with tables), sent as one
  write (the old `tc.change_batch`);
* ``packed``: `tc.change_batch` as it is, HTB classes packed without rate tables.

After every round the kernel's rates are read back (`tc.read`) and must be the ones
just set. Runs on any kernel with sch_htb (this host included); needs root:

    .venv/bin/python scripts/bench/tc_change.py [--classes 96] [--repeats 15]

Prints one JSON document: median (and p90) microseconds per class change per method,
and the ratios against ``pyroute2-batch``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from pyroute2.netlink import NLM_F_ACK, NLM_F_REQUEST  # noqa: E402
from pyroute2.netlink.rtnl import RTM_NEWTCLASS  # noqa: E402
from pyroute2.netlink.rtnl.tcmsg import plugins, tcmsg  # noqa: E402

from nestednet.adapters import netlink, tc  # noqa: E402
from nestednet.model import tcplan  # noqa: E402
from nestednet.model.tcplan import LinkShape  # noqa: E402

RATES = (20_000_000, 5_000_000)
METHODS = ("pyroute2", "pyroute2-batch", "packed")


def pyroute2_request(op: tcplan.TcOp, index: int, seq: int) -> bytes:
    """The request pyroute2 itself builds for ``op`` (with its rate tables)."""
    params = {**op.params, "parent": tc.handle_int(op.params["parent"])}
    msg = tcmsg()
    msg["index"] = index
    msg["handle"] = tc.handle_int(op.handle)
    msg["parent"] = params["parent"]
    msg["attrs"] = [["TCA_KIND", "htb"],
                    ["TCA_OPTIONS", plugins["htb"].get_class_parameters(
                        {"index": index, "handle": msg["handle"], **params})]]
    msg["header"]["type"] = RTM_NEWTCLASS
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg["header"]["sequence_number"] = seq
    msg.encode()
    return bytes(msg.data[:msg["header"]["length"]])


def run(method: str, ops: list[tcplan.TcOp], ns: str, indexes: dict[str, int]) -> float:
    began = time.perf_counter()
    if method == "pyroute2":
        with tc.rtnl(ns) as ipr:
            for op in ops:
                params = {**op.params, "parent": tc.handle_int(op.params["parent"])}
                ipr.tc(op.command, op.kind, index=indexes[op.port],
                       handle=tc.handle_int(op.handle), **params)
    elif method == "pyroute2-batch":
        packed = tc._encoded
        tc._encoded = pyroute2_request  # type: ignore[assignment]
        try:
            tc.change_batch(ops, ns, indexes)
        finally:
            tc._encoded = packed  # type: ignore[assignment]
    else:
        tc.change_batch(ops, ns, indexes)
    return time.perf_counter() - began


def held_rates(ns: str, ports: list[str]) -> set[int]:
    state = tc.read(ns, ports)
    return {c["rate_bps"] for port in ports for c in state[port]["classes"]
            if c["classid"] == tcplan.leaf_class(0)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=96, help="ports (one class each)")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    ns = f"tcb-{uuid.uuid4().hex[:6]}"
    ports = [f"tcb{i}" for i in range(args.classes)]
    netlink.create_netns(ns)
    try:
        with netlink.route(ns) as ipr:
            for i in range(0, len(ports), 2):
                peer = ports[i + 1] if i + 1 < len(ports) else f"tcbpeer{i}"
                ipr.link("add", ifname=ports[i], kind="veth", peer={"ifname": peer})
            for port in ports:
                netlink.up(ipr, port)
        tc.apply([op for p in ports for op in tcplan.port_tree_ops(
            p, p, LinkShape(RATES[0]), "htb", netem=False)], ns, ports)
        indexes = tc.port_indexes(ns, ports)
        seconds: dict[str, list[float]] = {m: [] for m in METHODS}
        current = RATES[0]
        for _ in range(args.repeats):
            for method in METHODS:
                new = RATES[1] if current == RATES[0] else RATES[0]
                ops = [op for p in ports for op in tcplan.leaf_change_ops(
                    p, "htb", 0, p, LinkShape(current), LinkShape(new), netem=False)]
                seconds[method].append(run(method, ops, ns, indexes))
                if held_rates(ns, ports) != {new}:
                    raise SystemExit(f"{method}: the kernel does not hold {new} bit/s")
                current = new
    finally:
        netlink.remove_netns(ns)
    per_class = {m: [s / args.classes * 1e6 for s in values] for m, values in seconds.items()}
    out = {"classes": args.classes, "repeats": args.repeats,
           "us_per_class": {m: {"median": round(statistics.median(v), 2),
                                "p90": round(statistics.quantiles(v, n=10)[-1], 2)}
                            for m, v in per_class.items()},
           "step_ms_median": {m: round(statistics.median(v) * 1000, 2)
                              for m, v in seconds.items()}}
    base = statistics.median(per_class["pyroute2-batch"])
    out["ratio_vs_pyroute2_batch"] = {m: round(statistics.median(v) / base, 4)
                                      for m, v in per_class.items()}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
