"""Measure what going through the per-host helper costs (issue #16, docs/multihost.md
section 5a), against the direct path `create --hosts` took before it (the host's
namespaces and sockets reached from this machine), on two emulated hosts, in one run.

Run under the system lock (it starts two emulated hosts and a 2 x 2 lab):

    flock /tmp/nestednet-system.lock python tests/system/hostd_probe.py

What it measures (p50 / p90 of REPEATS, the two ways alternating):
  1. a request's round trip on a kept connection, plain TCP and TLS, and a new
     connection plus one request (what each command pays once per host);
  2. `docker version` against a parent's inner engine: through the helper's forward of
     its docker.sock (a new helper connection per engine connection) and through the
     socket shared with this machine;
  3. one component (an iPHY of n2, on h1) unwired and wired again: the direct path
     (nestednet.lab.wiring on this machine, in the host's namespace by /proc, both
     OVSDBs through their unix sockets) against the helper path (`wire.component`,
     names recorded first, the switch calls applied here through the forwarded node
     OVSDB socket and the host's OVSDB over TCP), plain and TLS (the host's OVSDB then
     over SSL too), as `swap --restart` does it; after the last rewire a cross-host
     link must still carry pings.
Nothing is kept; the lab and the hosts are removed at the end.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import docker
import emulated_hosts

from nestednet.adapters import netlink
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.hostd import service
from nestednet.hostd.client import HelperClient
from nestednet.lab import multihost as mh
from nestednet.lab import swarm, wiring
from nestednet.lab.nodes import Lab
from nestednet.model import placement as pl
from nestednet.model import topology as topo
from nestednet.model.addressing import plan_from_dict
from nestednet.model.tunnels import control_mtu, inner_mtu

REPEATS = 15
LAB = "hp"
CLI = str(Path(sys.executable).parent / "nestednet")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1e3:.2f} / p90 {pct(values, 0.9) * 1e3:.2f} ms"


def timed(action) -> float:
    t0 = time.perf_counter()
    action()
    return time.perf_counter() - t0


def round_trips(hosts: emulated_hosts.EmulatedHosts) -> dict[str, str]:
    out = {}
    for label, hostset in (("plain", hosts.hostset), ("tls", hosts.ssl_hostset)):
        h = hostset.hosts[1]
        client = HelperClient(h.name, h.address, service.port_of(hostset), hostset.ssl,
                              insecure=hostset.insecure)
        client.call("hello")
        kept = [timed(lambda c=client: c.call("hello")) for _ in range(REPEATS * 4)]
        client.close()
        fresh = []
        for _ in range(REPEATS):
            def once(h=h, hostset=hostset) -> None:
                c = HelperClient(h.name, h.address, service.port_of(hostset), hostset.ssl,
                                 insecure=hostset.insecure)
                c.call("hello")
                c.close()
            fresh.append(timed(once))
        out[f"{label} request on a kept connection"] = ms(kept)
        out[f"{label} new connection + request"] = ms(fresh)
    return out


def main() -> int:
    hosts = emulated_hosts.start("nnprobe-hostd")
    results: dict[str, object] = {"load_before": Path("/proc/loadavg").read_text().split()[:3]}
    try:
        results.update(round_trips(hosts))
        path = hosts.root / "hosts.json"
        path.write_text(json.dumps(pl.hosts_doc(hosts.hostset)))
        t0 = time.monotonic()
        done = subprocess.run([CLI, "create", "--lab", LAB, "-n", "2", "-m", "2", "--hosts",
                               str(path), "--timings"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        results["create 2x2 s"] = round(time.monotonic() - t0, 1)
        results["create timings"] = [" ".join(ln.replace("│", " ").split())
                                     for ln in done.stdout.splitlines() if "│" in ln]
        lab = Lab.open(LAB)
        h1 = lab.meta["placement"]["2"]
        local = hosts.local[h1]
        handle = mh.connect(hosts.hostset.named(h1), hosts.hostset)
        secure = mh.connect(hosts.ssl_hostset.named(h1), hosts.ssl_hostset)
        parent = topo.parent_container(LAB, 2)
        pid_there = int(next(c for c in handle.engine.containers.list(
            filters={"label": f"{wiring.LAB_ID}={LAB}"})
            if c.labels.get("com.docker.swarm.service.name") == parent).attrs["State"]["Pid"])
        shared = f"unix://{local.state}/{parent}/docker.sock"
        forwarded = f"unix://{handle.forward(LAB, 2, 'docker.sock')}"
        engines = {"forwarded": [], "shared": []}
        for _ in range(REPEATS):
            for kind, url in (("forwarded", forwarded), ("shared", shared)):
                def version(url=url) -> None:
                    c = docker.DockerClient(base_url=url, timeout=30)
                    try:
                        c.version()
                    finally:
                        c.close()
                engines[kind].append(timed(version))
        results["inner engine `version`, new client each"] = {k: ms(v)
                                                              for k, v in engines.items()}
        plan = plan_from_dict(lab.shape, lab.meta["plan"])
        names = wiring.recorded_names(LAB, 2, [1])
        args = swarm._wiring_args(LAB, 2, pid_there, handle, lab.shape, plan, names)
        rewire = {"direct": [], "helper": [], "helper-tls": []}

        def inner_pid() -> int:
            c = docker.DockerClient(base_url=shared, timeout=30)
            try:
                return int(c.containers.get("iphy1").attrs["State"]["Pid"])
            finally:
                c.close()

        parent_here = hosts.pid_here(h1, pid_there)
        for _ in range(REPEATS):
            child = inner_pid()

            def direct(child: int = child) -> None:
                with Ovsdb(f"unix:{local.state}/{parent}/ovs/db.sock") as node_ovs, \
                        Ovsdb(f"unix:{local.state}/ovs/db.sock") as host_ovs:
                    h = wiring.NodeHandles(LAB, 2, parent_here, node_ovs, host_ovs, plan,
                                           lab.record, swarm.OFFLOADS, host_netns=local.netns,
                                           where=h1, control_on_host=True,
                                           inter_mtu=inner_mtu(), control_mtu=control_mtu())
                    wiring.unwire_component(h, 1)
                    wiring.wire_component(h, 1, netlink.host_pids(parent_here, [child])[child])

            def helper(child: int = child, handle: mh.HostHandle = handle) -> None:
                for name in names:
                    lab.record.add("veth", name, h1)
                done = handle.helper.call("wire.component", component=1, inner_pid=child,
                                          **args)
                with mh.node_ovsdb(LAB, 2, handle) as node_ovs:
                    mh.apply_switch_calls(LAB, done["ovs"], node_ovs, handle.ovs)

            rewire["direct"].append(timed(direct))
            rewire["helper"].append(timed(helper))
            child = inner_pid()
            rewire["helper-tls"].append(timed(lambda child=child: helper(child, secure)))
        results["rewire one iPHY (unwire + wire, OVSDB included)"] = {
            k: ms(v) for k, v in rewire.items()}
        results["rewire medians minus direct's, ms"] = {
            k: round((statistics.median(v) - statistics.median(rewire["direct"])) * 1e3, 2)
            for k, v in rewire.items() if k != "direct"}
        add = subprocess.run([CLI, "link", "add", "--lab", LAB, "n1:iphy1", "n2:iphy1"],
                             capture_output=True, text=True)
        assert add.returncode == 0, add.stderr
        address = str(plan.inter_address(2, 1).ip)
        ping = subprocess.run([CLI, "exec", "--lab", LAB, "n1", "iphy1", "--", "ping",
                               "-c", "3", "-W", "1", "-i", "0.3", address],
                              capture_output=True, text=True)
        results["ping across the rewired iPHY (replies of 3)"] = ping.stdout.count("bytes from")
        handle.close()
        secure.close()
        results["load_after"] = Path("/proc/loadavg").read_text().split()[:3]
    finally:
        done = subprocess.run([CLI, "delete", "--lab", LAB], capture_output=True, text=True)
        results["delete"] = done.returncode
        hosts.close()
        print(json.dumps(results, indent=1))
    return 0 if results.get("ping across the rewired iPHY (replies of 3)") == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
