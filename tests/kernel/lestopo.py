"""A small emulator topology of the shaping tests' own (every name starts with `les`).

Two client namespaces and a server namespace on one L2 segment through an
"emulator" namespace that holds the two shaped ports, like the testbed's le-cli /
le-srv but without the OVS router (shaping does not need it):

les-c1 [les-c1e]--[les-c1p]\\
                           les-cbr -[les-clip]=veth=[les-cli]- les-br -[les-srv]--[les-sve] les-sv
les-c2 [les-c2e]--[les-c2p]/      (bridges and the p/cli/srv ends inside netns les-emu)

Forward traffic (client -> server) leaves les-br through les-srv; backward traffic
leaves it through les-cli, so both shaped ports see exactly one direction.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import subprocess
import time
from dataclasses import dataclass

from pyroute2 import IPRoute, netns

from linkemu import tc
from nestednet.adapters import netns_exec

EMU = "les-emu"
CLIENTS = {"C1": ("les-c1", "les-c1e", "les-c1p", "198.18.0.11"),
           "C2": ("les-c2", "les-c2e", "les-c2p", "198.18.0.12")}
SERVER = ("les-sv", "les-sve", "198.19.0.10")
NAMESPACES = (EMU, *(c[0] for c in CLIENTS.values()), SERVER[0])
PREFIX = 15


@dataclass(frozen=True)
class Topology:
    emu: str = EMU
    client_port: str = "les-cli"
    server_port: str = "les-srv"
    server_ip: str = SERVER[2]

    def client_ip(self, client: str) -> str:
        return CLIENTS[client][3]

    def client_ns(self, client: str) -> str:
        return CLIENTS[client][0]


def _veth(ipr: IPRoute, a: str, b: str, b_netns: str | None = None) -> None:
    ipr.link("add", ifname=a, kind="veth", peer=b)
    if b_netns:
        ipr.link("set", index=ipr.link_lookup(ifname=b)[0], net_ns_fd=b_netns)


def _up(ipr: IPRoute, name: str, master: str | None = None, address: str | None = None) -> None:
    index = ipr.link_lookup(ifname=name)[0]
    if master:
        ipr.link("set", index=index, master=ipr.link_lookup(ifname=master)[0])
    if address:
        ipr.addr("add", index=index, address=address, prefixlen=PREFIX)
    ipr.link("set", index=index, state="up")


def build() -> Topology:
    destroy()
    for name in NAMESPACES:
        netns.create(name)
    with IPRoute(netns=EMU) as ipr:
        for bridge in ("les-br", "les-cbr"):
            ipr.link("add", ifname=bridge, kind="bridge")
        _veth(ipr, "les-cli", "les-clip")
        _veth(ipr, "les-srv", SERVER[1], SERVER[0])
        for ns, inner, outer, _ in CLIENTS.values():
            _veth(ipr, outer, inner, ns)
        for bridge in ("les-br", "les-cbr"):
            _up(ipr, bridge)
        _up(ipr, "les-cli", "les-br")
        _up(ipr, "les-srv", "les-br")
        _up(ipr, "les-clip", "les-cbr")
        for _, _, outer, _ in CLIENTS.values():
            _up(ipr, outer, "les-cbr")
        _up(ipr, "lo")
    ends = [(ns, inner, ip) for ns, inner, _, ip in CLIENTS.values()] + [SERVER]
    for ns, inner, ip in ends:
        with IPRoute(netns=ns) as ipr:
            _up(ipr, "lo")
            _up(ipr, inner, address=ip)
        tc.disable_offloads(ns, [inner])
    tc.disable_offloads(EMU, ["les-clip", *(c[2] for c in CLIENTS.values())])
    topo = Topology()
    for client in CLIENTS:  # ARP warm-up, and proof the segment works
        ping(topo.client_ns(client), topo.server_ip, count=2, interval=0.2)
    return topo


def destroy() -> None:
    for name in NAMESPACES:
        with contextlib.suppress(FileNotFoundError, OSError):
            netns.remove(name)


def run_in(ns: str, *cmd: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return netns_exec.run(ns, cmd, timeout=timeout)


def popen_in(ns: str, *cmd: str) -> subprocess.Popen:
    return netns_exec.popen(ns, cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_listening(ns: str, port: int, timeout: float = 20.0) -> None:
    """Until a TCP socket listens on ``port`` in ``ns`` (iperf3 -s starts slowly in the VM)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        done = run_in(ns, "ss", "-Hltn", f"sport = :{port}")
        if done.stdout.strip():
            return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on port {port} in {ns}")


@dataclass(frozen=True)
class PingResult:
    sent: int
    received: int
    rtts_ms: list[float]

    @property
    def loss_pct(self) -> float:
        return 100.0 * (self.sent - self.received) / self.sent

    @property
    def median_ms(self) -> float:
        return statistics.median(self.rtts_ms)


def ping(ns: str, dst: str, *, count: int, interval: float, size: int = 56,
         wait: float = 2.0) -> PingResult:
    quiet = ["-q"] if count > 200 else []
    done = run_in(ns, "ping", "-n", *quiet, "-c", str(count), "-i", str(interval),
                  "-s", str(size), "-W", str(wait), dst, timeout=count * interval * 20 + 60)
    sent = int(re.search(r"(\d+) packets transmitted", done.stdout).group(1))
    received = int(re.search(r"(\d+) received", done.stdout).group(1))
    rtts = [float(x) for x in re.findall(r"time=([\d.]+) ms", done.stdout)]
    if not rtts:
        found = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)/", done.stdout)
        rtts = [float(found.group(2))] if found else []
    return PingResult(sent, received, rtts)


def iperf3(client: str, topo: Topology, *, seconds: int = 5, udp_rate: str | None = None,
           port: int = 5201) -> dict:
    """Goodput (bit/s) of one transfer client -> server, iperf3 run between our namespaces."""
    server = popen_in(SERVER[0], "iperf3", "-s", "-1", "-p", str(port), "-B", topo.server_ip)
    try:
        wait_listening(SERVER[0], port)
        args = ["iperf3", "-c", topo.server_ip, "-p", str(port), "-t", str(seconds), "-J",
                "-B", topo.client_ip(client)]
        if udp_rate:
            args += ["-u", "-b", udp_rate]
        for _attempt in range(20):  # the server may take a while to listen in a slow VM
            done = run_in(topo.client_ns(client), *args, timeout=seconds * 10 + 60)
            data = json.loads(done.stdout)
            if "Connection refused" not in data.get("error", ""):
                break
            time.sleep(0.5)
        if "error" in data:
            raise RuntimeError(data["error"])
        end = data["end"]
        received = end.get("sum_received") or end.get("sum")
        return {"bps": received["bits_per_second"], "json": data}
    finally:
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def head_of_line(topo: Topology, load: str, *, port: int = 5202) -> tuple[PingResult, PingResult]:
    """Ping C1 -> server idle, then while C2 saturates its link (TCP, or UDP at 20 Mbit/s).

    Expects links already applied (C1 short delay, C2 long delay, same port).
    """
    idle = ping(topo.client_ns("C1"), topo.server_ip, count=30, interval=0.05)
    flood = popen_in(SERVER[0], "iperf3", "-s", "-1", "-p", str(port), "-B", topo.server_ip)
    try:
        wait_listening(SERVER[0], port)
        udp = ["-u", "-b", "20M"] if load == "udp" else []
        sender = popen_in(topo.client_ns("C2"), "iperf3", "-c", topo.server_ip, "-p", str(port),
                          *udp, "-t", "8", "-B", topo.client_ip("C2"))
        time.sleep(3.0)
        loaded = ping(topo.client_ns("C1"), topo.server_ip, count=60, interval=0.05, wait=3)
        sender.wait(timeout=120)
    finally:
        try:
            flood.wait(timeout=30)
        except subprocess.TimeoutExpired:  # its control connection may sit behind C2's queue
            flood.kill()
            flood.wait()
    return idle, loaded


def hol_summary(idle: PingResult, loaded: PingResult) -> dict:
    rtts = loaded.rtts_ms
    return {"idle_median_ms": idle.median_ms, "idle_p90_ms": p90(idle.rtts_ms),
            "loaded_median_ms": loaded.median_ms if rtts else None,
            "loaded_p90_ms": p90(rtts) if rtts else None,
            "loaded_max_ms": max(rtts) if rtts else None, "loaded_loss_pct": loaded.loss_pct}
