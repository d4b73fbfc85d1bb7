"""One timed Containernet lab in the paper's baseline shape; run by containernet_startup.py.

Runs under the scratch venv that holds Containernet (never the project's venv, and it
imports nothing of nestednet). Per node: one Docker host, a per-node OVS switch with
1 + M links (the GNAB and M iPHY interfaces) and M links to one shared main switch; all
switches userspace (`datapath="user"`), standalone, no controller, plain links. The time
is `Containernet()` → `start()` returning, split into its phases. Prints one JSON line,
then stops the network. Every name starts with PREFIX, so a crash leaves only names
this bench owns, and the cleanup after it touches nothing else (never `mn -c`).

    python containernet_lab.py NODES IPHYS PREFIX [IMAGE]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time


def main() -> int:
    nodes, iphys, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    image = sys.argv[4] if len(sys.argv) > 4 else "nestednet/component:latest"
    from mininet.log import setLogLevel
    from mininet.net import Containernet
    from mininet.node import OVSSwitch

    setLogLevel("error")
    phases: dict[str, float] = {}
    t0 = time.monotonic()
    net = Containernet(switch=OVSSwitch, controller=None)
    try:
        switch = {"datapath": "user", "failMode": "standalone"}
        main_switch = net.addSwitch(f"{prefix}m", dpid=f"{0xC31000:016x}", **switch)
        t = time.monotonic()
        hosts, switches = [], []
        for i in range(1, nodes + 1):
            hosts.append(net.addDocker(f"{prefix}h{i}", dimage=image, dcmd="sleep infinity",
                                       volumes=["/usr/sbin/ifconfig:/usr/sbin/ifconfig:ro"]))
            switches.append(net.addSwitch(f"{prefix}s{i}", dpid=f"{0xC31000 + i:016x}",
                                          **switch))
        phases["containers_s"] = time.monotonic() - t
        t = time.monotonic()
        for host, node_switch in zip(hosts, switches, strict=True):
            for _ in range(1 + iphys):
                net.addLink(host, node_switch)
            for _ in range(iphys):
                net.addLink(host, main_switch)
        phases["links_s"] = time.monotonic() - t
        t = time.monotonic()
        net.start()
        phases["start_s"] = time.monotonic() - t
        created = time.monotonic() - t0
        result = {"create_s": round(created, 3),
                  "phases": {k: round(v, 3) for k, v in phases.items()},
                  "veths": nodes * (1 + 2 * iphys)}
    finally:
        t = time.monotonic()
        try:
            net.stop()
        finally:
            _leftovers(prefix)
    result["stop_s"] = round(time.monotonic() - t, 3)
    print(json.dumps(result), flush=True)
    return 0


def _leftovers(prefix: str) -> None:
    """Remove what a failed run may leave: our containers and bridges, by our prefix only.
    (Mininet itself drives OVS through ovs-vsctl; the veth pairs go with the containers.)"""
    import docker

    client = docker.from_env()
    for container in client.containers.list(all=True, filters={"name": f"^mn.{prefix}h"}):
        if container.name.startswith(f"mn.{prefix}h"):
            container.remove(force=True)
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True,
                             text=True).stdout.split()
    for bridge in bridges:
        if bridge == f"{prefix}m" or (bridge.startswith(f"{prefix}s")
                                      and bridge[len(prefix) + 1:].isdigit()):
            subprocess.run(["ovs-vsctl", "--if-exists", "del-br", bridge], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
