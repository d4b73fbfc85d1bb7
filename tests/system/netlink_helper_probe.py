"""Measure a netlink-only per-host helper on the emulated hosts (issue #16, docs/multihost.md
section 5): can the netlink part of wiring run on a host through a Docker Swarm global
service, and what does it cost against doing it from this machine?

Run under the system lock (it starts two emulated hosts):

    flock /tmp/nestednet-system.lock python tests/system/netlink_helper_probe.py

What it does, per emulated host:
  1. a global Swarm service from the node-parent image, host network, NET_ADMIN and
     SYS_ADMIN, the host's /proc bind-mounted (the parents' and children's network
     namespaces are /proc/PID/ns/net of the host's pid namespace), pyroute2 bind-mounted
     from this machine's venv (the image has none): the time until its task runs on
     every host;
  2. inside the helper: the interfaces it sees (the host's namespace, or not?), and N
     times the core step of wiring: a veth pair made in the host's namespace, one end
     moved into a target container's namespace (a parent-like container started on that
     host's engine, no network), both ends up, then deleted; p50/p90 per step;
  3. the same step from this machine, as `create --hosts` does it today (the host's
     namespace reached at /proc/PID/ns/net here);
  4. the round trip of one call into the helper through the host's engine (`docker
     exec` of `true`): what a helper driven one process per call would add;
  5. the other candidate, the work done from inside the parents: a parent-like service
     (cap_add ALL, cap_drop SYS_RESOURCE, default seccomp, Swarm's default network, as
     node parents run) on h0: which interfaces and pids it sees, and whether its network
     namespace is the host's.
And, for the control path that is built (docs/multihost.md section 4d), on h0: an OVSDB
connection plus one read over the shared unix socket, tcp: and ssl:; an OpenFlow session
opened (HELLO and FEATURES) and a batch of one link's 2 flows added then deleted, over
the bridge's management socket, `ptcp:` and `pssl:` listeners; p50/p90.
Nothing is kept; the hosts are removed at the end.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path

import docker
import docker.types
import emulated_hosts
import pyroute2

from nestednet import images
from nestednet.adapters import netlink, openflow
from nestednet.adapters.ovsdb import Ovsdb

REPEATS = 20
HELPER = "nnprobe-netlink"

STEP = r"""
import json, os, sys, time
sys.path.insert(0, "/opt/probe")
from pyroute2 import IPRoute, NetNS
target, repeats = sys.argv[1], int(sys.argv[2])
with IPRoute() as ipr:
    names = sorted(l.get_attr("IFLA_IFNAME") for l in ipr.get_links())
    addresses = sorted(a.get_attr("IFA_ADDRESS") for a in ipr.get_addr(family=2))
times = []
for i in range(repeats):
    t0 = time.monotonic()
    with IPRoute() as ipr:
        ipr.link("add", ifname="nnp-a", kind="veth", peer="nnp-b")
        fd = os.open(f"/host/proc/{target}/ns/net", os.O_RDONLY)
        try:
            ipr.link("set", index=ipr.link_lookup(ifname="nnp-b")[0], net_ns_fd=fd)
        finally:
            os.close(fd)
        ipr.link("set", index=ipr.link_lookup(ifname="nnp-a")[0], state="up")
        with NetNS(f"/host/proc/{target}/ns/net") as ns:
            ns.link("set", index=ns.link_lookup(ifname="nnp-b")[0], state="up")
        ipr.link("del", index=ipr.link_lookup(ifname="nnp-a")[0])
    times.append(time.monotonic() - t0)
print(json.dumps({"links": names, "ipv4": addresses, "times": times}))
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:.1f} / p90 {pct(values, 0.9) * 1000:.1f} ms"


def from_here(host_netns: str, target_pid: int) -> list[float]:
    """The same step as `STEP`, from this machine into the host's namespace."""
    times = []
    for _ in range(REPEATS):
        t0 = time.monotonic()
        with netlink.route(host_netns) as ipr:
            ipr.link("add", ifname="nnp-a", kind="veth", peer="nnp-b")
            netlink.move(ipr, "nnp-b", f"/proc/{target_pid}/ns/net")
            netlink.up(ipr, "nnp-a")
            with netlink.route(f"/proc/{target_pid}/ns/net") as ns:
                netlink.up(ns, "nnp-b")
            netlink.delete(ipr, "nnp-a")
        times.append(time.monotonic() - t0)
    return times


LOOK = r"""
import json, os
from pyroute2 import IPRoute
with IPRoute() as ipr:
    names = sorted(l.get_attr("IFLA_IFNAME") for l in ipr.get_links())
print(json.dumps({"links": names, "pids": len([p for p in os.listdir("/proc") if p.isdigit()]),
                  "netns_inode": os.stat("/proc/self/ns/net").st_ino}))
"""


def parent_view(hosts: emulated_hosts.EmulatedHosts) -> dict:
    """What a task started as node parents are (nestednet.lab.multihost.parent_service)
    can reach on its host."""
    name, handle = hosts.names[0], hosts.handles[hosts.names[0]]
    local = hosts.local[name]
    service = hosts.manager.services.create(
        images.DIND_IMAGE, command=["sleep", "3600"], name="nnprobe-parent",
        constraints=[f"node.hostname=={name}"], cap_add=["ALL"], cap_drop=["SYS_RESOURCE"],
        mounts=[docker.types.Mount("/opt/probe", "/nestednet/probe", type="bind",
                                   read_only=True)],
        restart_policy=docker.types.RestartPolicy(condition="none"))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = handle.engine.containers.list(
                filters={"label": "com.docker.swarm.service.name=nnprobe-parent"})
            if found:
                break
            time.sleep(0.2)
        else:
            raise RuntimeError("the parent-like task did not run")
        done = found[0].exec_run(["sh", "-c", f"PYTHONPATH=/opt/probe python3 -c '{LOOK}'"])
        seen = json.loads(done.output.decode().strip().splitlines()[-1])
        with netlink.route(local.netns) as ipr:
            host_links = sorted(link.get_attr("IFLA_IFNAME") for link in ipr.get_links())
        return {"links": seen["links"], "pids_visible": seen["pids"],
                "own_netns_is_hosts": seen["netns_inode"] == Path(local.netns).stat().st_ino,
                "host_links": host_links}
    finally:
        service.remove()


def control_path(hosts: emulated_hosts.EmulatedHosts, repeats: int = 30) -> dict:
    """OVSDB and OpenFlow to h0 over its unix sockets, TCP and SSL (section 4d)."""
    handle = hosts.handles[hosts.names[0]]
    local = hosts.local[hosts.names[0]]
    address, tls = handle.address, hosts.control.tls
    bridge, dpid = "nnprobe-br", 0x4E4E00000000BEEF
    out: dict = {}
    remotes = {"unix": f"unix:{local.state}/ovs/db.sock",
               "tcp": hosts.control.ovsdb(address, False),
               "ssl": hosts.control.ovsdb(address, True)}
    for kind, remote in remotes.items():
        times = []
        for _ in range(5):
            t0 = time.monotonic()
            with Ovsdb(remote, tls=tls) as db:
                db.bridges()
            times.append(time.monotonic() - t0)
        out[f"ovsdb_connect_and_read_{kind}"] = ms(times)
    handle.ovs.add_bridge(bridge, datapath_type="netdev", external_ids={"nnprobe": "1"},
                          other_config={"datapath-id": f"{dpid:016x}"})
    try:
        handle.ovs.set_controller(bridge, f"ptcp:16601:{address}", f"pssl:16602:{address}",
                                  inactivity_probe=0)
        time.sleep(1)
        ways = {"unix": {"rundir": str(local.state / "ovs")},
                "tcp": {"listener": openflow.Listener(address, 16601)},
                "ssl": {"listener": openflow.Listener(address, 16602, tls)}}
        for kind, how in ways.items():
            opened, batches = [], []
            for _ in range(repeats):
                t0 = time.monotonic()
                channel = openflow.Channel(bridge, dpid=dpid, **how)
                opened.append(time.monotonic() - t0)
                try:
                    t0 = time.monotonic()
                    channel.change(add=[(0x4E4E000100000002, 1, 2)])
                    channel.change(delete=[0x4E4E000100000002])
                    batches.append((time.monotonic() - t0) / 2)
                finally:
                    channel.close()
            out[f"openflow_open_{kind}"] = ms(opened)
            out[f"openflow_batch_{kind}"] = ms(batches)
    finally:
        handle.ovs.del_bridge(bridge)
    return out


def main() -> None:
    hosts = emulated_hosts.start("nnprobe")
    report: dict = {"hosts_up": hosts.timings}
    try:
        for name in hosts.names:
            # pyroute2 for the helper, through the directory each host shares with us.
            shutil.copytree(Path(pyroute2.__file__).parent,
                            hosts.root / name / "probe" / "pyroute2")
        t0 = time.monotonic()
        service = hosts.manager.services.create(
            images.DIND_IMAGE, command=["sleep", "3600"], name=HELPER,
            mode=docker.types.ServiceMode("global"), networks=["host"],
            cap_add=["NET_ADMIN", "SYS_ADMIN"],
            mounts=[docker.types.Mount("/host/proc", "/proc", type="bind"),
                    docker.types.Mount("/opt/probe", "/nestednet/probe", type="bind",
                                       read_only=True)],
            restart_policy=docker.types.RestartPolicy(condition="none"))
        report["service"] = {"spec_accepted": True}
        tasks: dict[str, object] = {}
        deadline = time.monotonic() + 120
        while len(tasks) < len(hosts.names) and time.monotonic() < deadline:
            for name, handle in hosts.handles.items():
                found = handle.engine.containers.list(
                    filters={"label": f"com.docker.swarm.service.name={HELPER}"})
                if found and name not in tasks:
                    tasks[name] = found[0]
                    report["service"][f"running_on_{name}_s"] = round(time.monotonic() - t0, 2)
            time.sleep(0.2)
        if len(tasks) < len(hosts.names):
            report["service"]["tasks"] = [t["Status"] for t in service.tasks()]
            raise RuntimeError(f"helper tasks not running: {report}")
        for name, handle in hosts.handles.items():
            target = handle.engine.containers.run(
                images.DIND_IMAGE, entrypoint=["sleep", "3600"], detach=True,
                network_mode="none", name=f"nnprobe-target-{name}", labels={"nnprobe": "1"})
            try:
                target.reload()
                pid_there = int(target.attrs["State"]["Pid"])
                done = tasks[name].exec_run(["python3", "-c", STEP, str(pid_there),
                                             str(REPEATS)])
                if done.exit_code != 0:
                    report[name] = {"helper_error": done.output.decode()[-800:]}
                    continue
                inside = json.loads(done.output.decode().strip().splitlines()[-1])
                pid_here = hosts.pid_here(name, pid_there)
                here = from_here(hosts.local[name].netns, pid_here)
                calls = []
                for _ in range(10):
                    c0 = time.monotonic()
                    tasks[name].exec_run(["true"])
                    calls.append(time.monotonic() - c0)
                report[name] = {
                    "helper_sees_links": inside["links"],
                    "helper_sees_ipv4": inside["ipv4"],
                    "step_in_helper": ms(inside["times"]),
                    "step_from_here": ms(here),
                    "docker_exec_round_trip": ms(calls),
                    "step_in_helper_mean_ms": round(statistics.mean(inside["times"]) * 1000, 2),
                    "step_from_here_mean_ms": round(statistics.mean(here) * 1000, 2),
                }
            finally:
                target.remove(force=True)
        service.remove()
        report["parent_like"] = parent_view(hosts)
        report["control_path"] = control_path(hosts)
    finally:
        hosts.close()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
