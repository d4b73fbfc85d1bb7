"""A multi-host lab's data plane, control net and nodes, realised host by host (issue #16).

What the pure model (nestednet.model.placement, nestednet.model.tunnels) decided is made
here: on every host the main bridge and one VXLAN port per peer host; the control net
(a Linux bridge per host, a VXLAN from each host to the CA's control namespace on this
machine); node parents as Docker Swarm services pinned to their host
(`node.hostname==HOST`), which run under Docker's default seccomp profile and so start
their children through runc's --no-new-keyring --no-pivot (images/dind/runc-no-keyring,
docs/multihost.md); links as flows on one or two hosts. Nodes are wired as nested ones
are (nestednet.lab.wiring, with the host's namespace as their host side: swarm.py).

A host is reached through a `HostHandle`, over the network only, the same way whether
it is a real machine or one emulated here by the tests: its Docker engine at the hosts
file's `engine` URL, OVSDB at its `ovsdb` remote (tcp: or ssl:), OpenFlow to a listener
each lab gives its main bridge on the host's address (`ptcp:`/`pssl:`, port and
datapath id from nestednet.model.tunnels), and everything else through the host's
helper (nestednet.hostd, a Swarm global service): the netlink part of wiring and
shaping (tunnels, control bridge, veths into parents, tc) and its removal, the
parents' state directories and their unix sockets (forwarded), the route watch.
Every resource is named after the lab and labelled with it, and recorded (with its
host) before it is made.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import docker.types

from nestednet.adapters import docker_engine, netlink, openflow
from nestednet.adapters.ovsdb import LazyOvsdb, Ovsdb
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.hostd import client as hostd
from nestednet.hostd import protocol
from nestednet.hostd import service as hostd_service
from nestednet.lab.design import labels
from nestednet.lab.links import COOKIE_MARK, LabLinks
from nestednet.lab.record import DIRECTORY, OVS_BRIDGE, SERVICE, VETH, LabRecord, Resource
from nestednet.lab.wiring import LAB_ID
from nestednet.model import link_rules
from nestednet.model import topology as topo
from nestednet.model.placement import Host, HostSet, Tls
from nestednet.model.tunnels import VXLAN_PORT, ControlTunnel, DataPlane, Tunnel, control_mtu

PARENT_SERVICE_CAPS = {"cap_add": ["ALL"], "cap_drop": ["SYS_RESOURCE"]}
"""All a Swarm service can carry (no --security-opt, --device, --privileged)."""
INNER_RUNTIME_ENV = {"NESTEDNET_INNER_RUNTIME": "no-keyring"}
SERVICE_LABEL = f"{LAB_ID}.host"


LISTENER_WAIT = 5.0
"""Seconds a new main bridge's OpenFlow listener may take to come up: ovs-vswitchd
applies the controller target after the OVSDB transaction that set it has committed."""


@dataclass
class HostHandle:
    """One host as seen from here, every part over the network: ``engine`` (its Docker
    engine), ``ovs`` (its OVSDB), OpenFlow sessions to ``address`` (`channel`) and its
    helper (``helper``: netlink, tc, the parents' state directories under
    ``state_there`` and their sockets)."""

    name: str
    engine: docker.DockerClient
    ovs: Ovsdb | LazyOvsdb
    address: str
    """The host's underlay address: its main bridges' OpenFlow listeners are there."""
    tls: Tls | None
    """This machine's side of SSL sessions (hosts file `ssl`); None: plain TCP."""
    helper: hostd.HelperClient
    state_there: str
    """The host's state directory (the parents' directories), as the host names it."""

    @property
    def netns(self) -> str:
        """How the shaper names this host's namespace (its tc runs in the helper)."""
        return f"{hostd.HOST_NETNS}{self.name}"

    def forward(self, lab: str, node: int, name: str) -> str:
        """A path here reaching one of node ``node``'s parent sockets on the host
        (protocol.SOCKETS: its inner engine, its node OVSDB)."""
        return str(self.helper.forward(lab, topo.parent_container(lab, node), name))

    def close(self) -> None:
        for part in (self.ovs, self.engine, self.helper):
            with contextlib.suppress(Exception):
                part.close()

    def listener(self, port: int) -> openflow.Listener:
        """Where a main bridge listening on ``port`` is reached (and what it is told to
        listen on: `Listener.passive`)."""
        return openflow.Listener(self.address, port, self.tls)

    def channel(self, bridge: str, port: int, dpid: int, *, timeout: float = 10.0,
                wait: float = 0.0) -> openflow.Channel:
        """An OpenFlow session with ``bridge`` over the network, refused unless the switch
        there has datapath id ``dpid``; a refused connection is retried for ``wait``
        seconds (a bridge just made)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return openflow.Channel(bridge, timeout=timeout, listener=self.listener(port),
                                        dpid=dpid)
            except EnvironmentProblem as exc:
                if not isinstance(exc.__cause__, ConnectionRefusedError) or \
                        time.monotonic() >= deadline:
                    raise
            time.sleep(0.05)


# --- lab networks: main bridges and tunnels ---------------------------------------------


def make_networks(lab: str, dp: DataPlane, hosts: Mapping[str, HostHandle],
                  datapath: str = "netdev", underlay_dev: str = "eth0",
                  record: LabRecord | None = None) -> None:
    """On every host holding nodes: the main bridge (secure, no flows) and its tunnels,
    each written to ``record`` (under the host's name) before it is made."""
    for name, tunnels in dp.tunnels.items():
        host = hosts[name]
        if record is not None:
            record.add(OVS_BRIDGE, topo.main_bridge(lab), name)
        _make_main_bridge(lab, dp, host, datapath)
        for tunnel in tunnels:
            _make_tunnel(lab, host, tunnel, underlay_dev, record)


def _make_main_bridge(lab: str, dp: DataPlane, host: HostHandle, datapath: str) -> None:
    """The host's main bridge, listening for OpenFlow on the host's address (the lab's
    port; SSL when the hosts file gives certificates), with a fixed datapath id that
    sessions check. In-band control off: the listener is reached over the host's own
    stack, never through this bridge. A session is opened at once, so a listener this
    machine cannot reach (a firewall, a wrong address) fails the create here."""
    bridge = topo.main_bridge(lab)
    host.ovs.add_bridge(bridge, datapath_type=datapath, external_ids={LAB_ID: lab},
                        fail_mode="secure",
                        other_config={"datapath-id": f"{dp.dpid(host.name):016x}",
                                      "disable-in-band": "true"})
    # No inactivity probes: a CA's session idles while agents say HELLO, and OVS closes
    # a session whose echo request is unanswered for two intervals (5 s by default).
    host.ovs.set_controller(bridge, host.listener(dp.openflow_port).passive(),
                            inactivity_probe=0)
    host.channel(bridge, dp.openflow_port, dp.dpid(host.name), wait=LISTENER_WAIT).close()


def refuse_taken(host: HostHandle, names: list[str]) -> None:
    """Nothing is recorded under a name someone else holds on ``host``."""
    taken = [n for n, there in host.helper.call("link.exists", names=names).items() if there]
    if taken:
        raise EnvironmentProblem(f"{', '.join(taken)} exist(s) already on {host.name}",
                                 hint="a crashed lab of that name: delete it first")


def _make_tunnel(lab: str, host: HostHandle, tunnel: Tunnel, underlay_dev: str,
                 record: LabRecord | None) -> None:
    refuse_taken(host, [tunnel.name])
    if record is not None:
        record.add(VETH, tunnel.name, host.name)
    host.helper.call("link.vxlan", lab=lab, name=tunnel.name, vni=tunnel.vni,
                     local=tunnel.local_ip, remote=tunnel.remote_ip, port=VXLAN_PORT,
                     underlay=underlay_dev, mtu=None, master=None)
    host.ovs.add_port(topo.main_bridge(lab), tunnel.name, ofport=tunnel.ofport,
                      external_ids={LAB_ID: lab, f"{LAB_ID}.peer": tunnel.peer})


# --- the control net: a bridge per host, a VXLAN from each host to the CA ----------------


def ca_underlay_address(hosts: HostSet, placement: Mapping[int, str]) -> str:
    """This machine's address toward the lab's hosts (the source the kernel picks for
    the first host that holds nodes): the local end of every control tunnel."""
    first = next(h for h in hosts.hosts if h.name in set(placement.values()))
    with netlink.route() as ipr:
        return netlink.source_address(ipr, first.address)


def make_control_net(lab: str, tunnels: list[ControlTunnel],
                     hosts: Mapping[str, HostHandle], underlay_dev: str = "eth0",
                     record: LabRecord | None = None) -> None:
    """The lab's control net beyond this machine: on every host a bare Linux bridge
    (`topo.control_bridge`, where its GNABs' control veths attach) and a VXLAN device
    on it toward this machine; here, each host's tunnel end, made in this machine's
    namespace (so its UDP socket stays on the underlay) and then moved into the lab's
    control namespace, onto the CA's bridge, which must exist. Packets between a GNAB
    and the CA are encapsulated on the underlay: nothing is moved between hosts'
    namespaces, so a real host would need only the same devices made there. Each
    device is written to ``record`` (with its host) before it is made; the bridges and
    tunnels count as interfaces (kind veth: deleted by name)."""
    ctl_bridge, ctl_netns = topo.control_bridge(lab), topo.control_netns(lab)
    for tunnel in tunnels:
        host = hosts[tunnel.host]
        refuse_taken(host, [ctl_bridge, tunnel.host_device])
        if record is not None:
            record.add(VETH, ctl_bridge, host.name)
            record.add(VETH, tunnel.host_device, host.name)
        host.helper.batch([
            ("link.bridge", {"lab": lab, "name": ctl_bridge}),
            ("link.vxlan", {"lab": lab, "name": tunnel.host_device, "vni": tunnel.vni,
                            "local": tunnel.host_ip, "remote": tunnel.ca_ip,
                            "port": VXLAN_PORT, "underlay": underlay_dev,
                            "mtu": control_mtu(), "master": ctl_bridge})])
        with netlink.route() as here:
            if netlink.exists(here, tunnel.ca_device):
                raise EnvironmentProblem(f"{tunnel.ca_device} exists already on this machine",
                                         hint="a crashed lab of that name: delete it first")
            if record is not None:
                record.add(VETH, tunnel.ca_device)
            netlink.add_vxlan(here, tunnel.ca_device, vni=tunnel.vni, local=tunnel.ca_ip,
                              remote=tunnel.host_ip, port=VXLAN_PORT, mtu=control_mtu())
            netlink.move(here, tunnel.ca_device, ctl_netns)
        with netlink.route(ctl_netns) as ctl:
            netlink.configure(ctl, tunnel.ca_device, master=ctl_bridge)


# --- nodes: a Swarm service per parent, iPHY children, wiring ----------------------------


def parent_service(manager: docker.DockerClient, lab: str, node: int, host: HostHandle,
                   image: str, record: LabRecord | None = None
                   ) -> docker.models.services.Service:
    """Start node ``node``'s parent as a Swarm service pinned to ``host`` (its state
    directory and the service written to ``record`` first)."""
    name = topo.parent_container(lab, node)
    if record is not None:
        record.add(DIRECTORY, f"{host.state_there}/{name}", host.name)
    host.helper.call("state.mkdir", lab=lab, name=name)
    if record is not None:
        record.add(SERVICE, name, host.name)
    spec_labels = labels(lab, node=topo.node_name(node), role="parent")
    return manager.services.create(
        image, name=name, hostname=topo.node_name(node), labels={**spec_labels,
                                                                  SERVICE_LABEL: host.name},
        container_labels=spec_labels, constraints=[f"node.hostname=={host.name}"],
        env=[f"{k}={v}" for k, v in INNER_RUNTIME_ENV.items()],
        mounts=[docker.types.Mount("/nestednet", f"{host.state_there}/{name}", type="bind")],
        restart_policy=docker.types.RestartPolicy(condition="none"),
        cap_add=PARENT_SERVICE_CAPS["cap_add"], cap_drop=PARENT_SERVICE_CAPS["cap_drop"])


def wait_parent(lab: str, node: int, host: HostHandle, timeout: float = 300) -> int:
    """Wait for the parent's entrypoint to say ready (its state directory on the host,
    read by the helper); returns the parent's pid on its host (the host's engine's)."""
    name = topo.parent_container(lab, node)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = host.helper.call("state.parent", lab=lab, name=name)
        if state["failed"] is not None:
            raise EnvironmentProblem(f"parent {name} on {host.name} failed: {state['failed']}")
        if state["ready"]:
            found = host.engine.containers.list(filters={"label": f"{LAB_ID}={lab}",
                                                         "name": name})
            if found:
                return int(found[0].attrs["State"]["Pid"])
        time.sleep(0.2)
    raise EnvironmentProblem(f"parent {name} on {host.name} not ready after {timeout:.0f} s")


def inner_engine(lab: str, node: int, host: HostHandle) -> docker.DockerClient:
    """The parent's inner engine, through its socket forwarded by the host's helper."""
    sock = host.forward(lab, node, "docker.sock")
    return docker_engine.client_for(f"unix://{sock}")


def node_ovsdb(lab: str, node: int, host: HostHandle) -> Ovsdb:
    """The parent's own OVSDB, through its socket forwarded by the host's helper."""
    return Ovsdb(f"unix:{host.forward(lab, node, 'ovs/db.sock')}")


SWITCH_KWARGS = {"external_ids", "ofport", "iface_type", "datapath_type", "protocols",
                 "fail_mode", "other_config"}


def check_switch_call(lab: str, call: Any) -> None:
    """A switch call the helper handed back is one wiring makes for ``lab``: a known
    method on the lab's bridge (the node's inside its parent, the lab's main bridge on
    the host) with the lab's port names; a helper cannot make this machine touch
    another bridge or port."""
    if not (isinstance(call, list) and len(call) == 4 and isinstance(call[2], list)
            and isinstance(call[3], dict)):
        raise EnvironmentProblem(f"the helper handed back a malformed switch call {call!r}")
    target, method, args, kwargs = call
    if method not in protocol.SWITCH_CALLS.get(target, ()) or \
            (target == "host" and method == "add_bridge"):
        raise EnvironmentProblem(f"the helper asked for {target}.{method}: not a wiring "
                                 "call")
    bridge = topo.node_bridge(lab) if target == "node" else topo.main_bridge(lab)
    names = {"add_bridge": ([bridge], []), "add_port": ([bridge], [args[1:2]]),
             "del_port": ([], [args[:1]])}[method]
    ok = (args[:1] == names[0] if names[0] else True) and all(
        len(n) == 1 and protocol.is_lab_interface(n[0], lab) for n in names[1]) and \
        len(args) == (2 if method == "add_port" else 1) and set(kwargs) <= SWITCH_KWARGS
    if not ok:
        raise EnvironmentProblem(f"the helper asked for {target}.{method}{tuple(args)}: "
                                 f"not lab {lab}'s bridge or port")


def apply_switch_calls(lab: str, calls: list, node_ovs: Ovsdb,
                       host_ovs: Ovsdb | LazyOvsdb) -> None:
    """The OVSDB calls the helper's wiring collected (nestednet.hostd.server.Deferred), in
    order, on the node's switch and the host's, each checked first (`check_switch_call`)."""
    for call in calls:
        check_switch_call(lab, call)
    for target, method, args, kwargs in port_runs(calls):
        getattr(node_ovs if target == "node" else host_ovs, method)(*args, **kwargs)


def port_runs(calls: list) -> list:
    """``calls`` with each run of `add_port` on one switch's bridge made one `add_ports`
    (one transaction; nestednet.lab.wiring.PortBatch says why)."""
    out: list = []
    for target, method, args, kwargs in calls:
        last = out[-1] if out else None
        if method == "add_port":
            bridge, port = args
            if last and last[1] == "add_ports" and last[0] == target and last[2][0] == bridge:
                last[2][1].append((port, kwargs))
            else:
                out.append([target, "add_ports", [bridge, [(port, kwargs)]], {}])
        else:
            out.append([target, method, args, kwargs])
    return out


def helper_pids(host: HostHandle, lab: str, node: int, parent_pid: int,
                inner: list[int]) -> dict[int, int]:
    """Pids in a parent's pid namespace -> pids on its host (the helper reads its /proc
    and checks the parent is ``lab``'s node ``node``)."""
    found = host.helper.call("pids", lab=lab, node=node, parent=parent_pid, inner=inner)
    return {int(k): v for k, v in found.items()}


# --- links -------------------------------------------------------------------------------


def links(lab: str, dp: DataPlane, hosts: Iterable[HostHandle]) -> set[int]:
    """Link cookies present on any host's main bridge (a host whose listener refuses the
    connection has no main bridge of the lab: nothing there)."""
    found: set[int] = set()
    for host in hosts:
        # OpenFlow, not OVSDB: `run` reads links on a thread that must finish
        # (nestednet.adapters.ovsdb.LazyOvsdb says why).
        try:
            channel = host.channel(topo.main_bridge(lab), dp.openflow_port,
                                   dp.dpid(host.name))
        except EnvironmentProblem as exc:
            if isinstance(exc.__cause__, ConnectionRefusedError):
                continue
            raise
        try:
            found |= {c for c in channel.cookies() if c >> 48 == COOKIE_MARK >> 48}
        finally:
            channel.close()
    return found


# --- delete and what is left -------------------------------------------------------------


def leftovers(lab: str, manager: docker.DockerClient, hosts: Iterable[HostHandle]) -> list[str]:
    """What of ``lab`` exists anywhere (empty after a clean delete)."""
    left = [f"service {s.name}" for s in
            manager.services.list(filters={"label": f"{LAB_ID}={lab}"})]
    for host in hosts:
        left += [f"{host.name}: container {c['Names'][0].lstrip('/')}"
                 for c in _lab_containers(lab, host)]
        left += [f"{host.name}: OVS bridge {b}" for b, ids in host.ovs.bridges().items()
                 if ids.get(LAB_ID) == lab or b == topo.main_bridge(lab)]
        left += [f"{host.name}: interface {n}"
                 for n in host.helper.call("link.list", lab=lab)]
        left += [f"{host.name}: {n}/" for n in host.helper.call("state.list", lab=lab)]
    return left



# --- reaching the hosts of a lab -----------------------------------------------------------


def connect(host: Host, hosts: HostSet, *, connect_timeout: float = 10.0) -> HostHandle:
    """A handle on ``host``, every part over the network: its engine at the hosts file's
    `engine` URL, OVSDB at its `ovsdb` remote, OpenFlow to its address and its helper
    (nestednet.hostd, `nestednet hosts prepare`), TLS for both with the file's `ssl`.
    The helper is asked `hello` here, so an absent one fails at once, named."""
    missing = [key for key in ("engine", "ovsdb") if getattr(host, key) is None]
    if missing:
        raise UsageError(f"host {host.name}: the hosts file gives no "
                         f"{' and no '.join(f'`{m}`' for m in missing)}",
                         hint="e.g. \"engine\": \"ssh://root@ADDRESS\", \"ovsdb\": "
                              "\"ssl:ADDRESS:6641\" (docs/multihost.md, section 3)")
    helper = hostd.HelperClient(host.name, host.address, hostd_service.port_of(hosts),
                                hosts.ssl, insecure=hosts.insecure,
                                connect_timeout=connect_timeout)
    try:
        hello = helper.call("hello")
    except EnvironmentProblem:
        helper.close()
        raise
    if hello.get("version") != protocol.VERSION:
        helper.close()
        raise EnvironmentProblem(f"host {host.name}: its helper speaks protocol "
                                 f"{hello.get('version')}, this machine {protocol.VERSION}",
                                 hint="`nestednet hosts prepare --hosts FILE` with this "
                                      "machine's helper image")
    return HostHandle(host.name, docker_engine.client_for(host.engine, timeout=300),
                      LazyOvsdb(host.ovsdb, hosts.ssl), host.address, hosts.ssl, helper,
                      str(hello["state_dir"]))


def connect_all(hosts: HostSet, names: Iterable[str]) -> dict[str, HostHandle]:
    handles: dict[str, HostHandle] = {}
    try:
        for name in names:
            handles[name] = connect(hosts.named(name), hosts)
    except BaseException:
        close_all(handles.values())
        raise
    return handles


def close_all(handles: Iterable[HostHandle]) -> None:
    for handle in handles:
        handle.close()


# --- links of a multi-host lab ------------------------------------------------------------


@dataclass(frozen=True)
class HostLinks(LabLinks):
    """`LabLinks` over several hosts: the same cookies, checks and lock; the flows go to
    every host a link touches, through an OpenFlow session with each host's main bridge
    over the network (all hosts sent their part before any answer is read), and are read
    back from all of them the same way."""

    dp: DataPlane | None = None
    hosts: Mapping[str, HostHandle] | None = None

    shaping_offloads_off = False

    def _hosts(self) -> Mapping[str, HostHandle]:
        assert self.hosts is not None and self.dp is not None
        return self.hosts

    def netns_of(self, end: topo.Endpoint) -> str | None:
        return self._hosts()[self.dp.host_of(end)].netns

    def tc_for(self, netns: str | None) -> Any:
        """A shaped port's tc runs in its host's helper (``netns`` names the host)."""
        if netns is None or not netns.startswith(hostd.HOST_NETNS):
            raise EnvironmentProblem(f"a shaped port of lab {self.lab} names namespace "
                                     f"{netns!r}, not a host of the lab")
        return hostd.RemoteTc(self._hosts()[netns[len(hostd.HOST_NETNS):]].helper, self.lab)

    def where(self, end: topo.Endpoint) -> str:
        return self.dp.host_of(end)

    def netem_available(self) -> bool:
        """Every host of the lab has sch_netem, as its helper finds in that host's kernel
        (the CLI machine's kernel shapes none of these ports)."""
        return all(host.helper.call("qdiscs").get("netem", False)
                   for _name, host in sorted(self._hosts().items()))

    def link_cookies(self) -> set[int]:
        return links(self.lab, self.dp, self._hosts().values())

    def install(self, a: topo.Endpoint, b: topo.Endpoint) -> None:
        self._apply(self._rules(a, b))

    def uninstall(self, a: topo.Endpoint, b: topo.Endpoint) -> None:
        self._apply({h: ([], [self.cookie(a, b)], []) for h in self.dp.hosts_of_link(a, b)})

    def clear(self) -> None:
        self._apply({h: ([], [], [(COOKIE_MARK, 0xFFFF << 48)]) for h in self.dp.tunnels})

    def apply_step(self, add: list[link_rules.Link], remove: list[link_rules.Link]
                   ) -> dict[str, float]:
        """One step's removals and additions: one batch per host touched, every host's
        sent before any answer is read. Returns when each host had applied its part, in
        seconds from the start (their spread is how far apart the hosts changed)."""
        per_host: dict[str, openflow.Batch] = {}
        for a, b in remove:
            for h in self.dp.hosts_of_link(a, b):
                per_host.setdefault(h, ([], [], []))[1].append(self.cookie(a, b))
        for a, b in add:
            for h, (rules, _, _) in self._rules(a, b).items():
                per_host.setdefault(h, ([], [], []))[0].extend(rules)
        return self._apply(per_host)

    def describe(self, link: link_rules.Link) -> dict:
        a, b = link
        return {**super().describe(link), "hosts": self.dp.hosts_of_link(a, b)}

    def _rules(self, a: topo.Endpoint, b: topo.Endpoint) -> dict[str, openflow.Batch]:
        per_host: dict[str, openflow.Batch] = {}
        for flow in self.dp.link_flows(a, b):
            per_host.setdefault(flow.host, ([], [], []))[0].append(
                (self.cookie(a, b), flow.in_port, flow.out_port, flow.match_tag,
                 flow.push_tag))
        return per_host

    def _apply(self, per_host: Mapping[str, openflow.Batch]) -> dict[str, float]:
        """Each host's part over a session with its bridge, all or nothing
        (`openflow.apply_all`); seconds from the start until each host had applied it. A
        host that refuses any of it raises, and then no host changed."""
        work = {name: batch for name, batch in sorted(per_host.items()) if any(batch)}
        if not work:
            return {}
        channels: dict[str, openflow.Channel] = {}
        try:
            for name in work:
                channels[name] = self._hosts()[name].channel(
                    self.bridge, self.dp.openflow_port, self.dp.dpid(name))
            finished, refused = openflow.apply_all(channels, work, timeout=10.0)
        finally:
            for channel in channels.values():
                channel.close()
        if refused:
            raise EnvironmentProblem("; ".join(f"host {h} refused flow changes: "
                                               + "; ".join(e[:3]) for h, e in refused.items()))
        return finished


# --- delete from the lab record -----------------------------------------------------------


@dataclass
class Removal:
    """What removing a lab's part on other hosts did: ``items`` removed, and the hosts
    that could not be reached (host -> why), whose part is left there."""

    items: list[str]
    unreachable: dict[str, str]


CONNECT_TIMEOUT = 5.0
"""Seconds `delete` and `cleanup --hosts` wait for a host's helper to accept a
connection before taking the host as unreachable."""


def remove_recorded(lab: str, hosts: HostSet, resources: Iterable[Resource],
                    dry_run: bool = False) -> Removal:
    """Remove the recorded resources of ``lab`` that live on other hosts: services first
    (Swarm stops their containers), then per host its containers' volumes, bridges,
    interfaces and state directories. Only what carries the lab's label or name. A host
    that does not answer is skipped (`Removal.unreachable`): the others are cleared all
    the same (a lab whose host was lost, issue #32)."""
    elsewhere = [r for r in resources if r.where != "host"]
    result = Removal([], {})
    if not elsewhere:
        return result
    removed = result.items
    names = sorted({r.where for r in elsewhere})
    reachable = {}
    for name in names:
        try:
            reachable[name] = connect(hosts.named(name), hosts,
                                      connect_timeout=CONNECT_TIMEOUT)
        except EnvironmentProblem as exc:
            result.unreachable[name] = str(exc)
    try:
        services = {r.name for r in elsewhere if r.kind == SERVICE}
        # Named before the services go: Swarm removes their containers, not always the
        # parents' anonymous volumes (the inner engines' data).
        volumes = {name: _volumes(lab, host) for name, host in reachable.items()}
        if services and reachable:
            manager = hostd_service.swarm_manager(reachable)
            for service in manager.services.list(filters={"label": f"{LAB_ID}={lab}"}):
                if service.name in services:
                    if not dry_run:
                        service.remove()
                    removed.append(f"service {service.name}")
        for name, host in reachable.items():
            mine = [r for r in elsewhere if r.where == name]
            containers = _wait_containers_gone(lab, host, dry_run)
            for c in containers:
                if not dry_run:
                    with contextlib.suppress(docker.errors.NotFound):
                        host.engine.api.remove_container(c["Id"], v=True, force=True)
                removed.append(f"{name}: container {c['Names'][0].lstrip('/')}")
            for volume in volumes[name]:
                if not dry_run:
                    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                        host.engine.volumes.get(volume).remove(force=True)
                removed.append(f"{name}: volume {volume[:12]}")
            bridges = host.ovs.bridges()
            for r in (r for r in mine if r.kind == OVS_BRIDGE):
                if bridges.get(r.name, {}).get(LAB_ID) == lab:
                    if not dry_run:
                        host.ovs.del_bridge(r.name)
                    removed.append(f"{name}: OVS bridge {r.name}")
            interfaces = sorted({r.name for r in mine
                                 if r.kind == VETH and r.name.startswith(f"{lab}-")})
            if interfaces:
                gone = ([n for n, there in host.helper.call("link.exists", names=interfaces)
                         .items() if there] if dry_run
                        else host.helper.call("link.delete", lab=lab, names=interfaces))
                removed += [f"{name}: interface {n}" for n in sorted(gone)]
            prefix = f"{host.state_there}/"
            directories = sorted({r.name[len(prefix):] for r in mine if r.kind == DIRECTORY
                                  and r.name.startswith(prefix)
                                  and protocol.PARENT_DIR.fullmatch(r.name[len(prefix):])})
            if directories:
                there = set(host.helper.call("state.list", lab=lab))
                gone = ([d for d in directories if d in there] if dry_run
                        else host.helper.call("state.remove", lab=lab, names=directories))
                removed += [f"{name}: directory {d}/" for d in gone]
    finally:
        close_all(reachable.values())
    return result


def remove_found(lab: str, host: HostHandle, names: Iterable[str] = (),
                 dry_run: bool = False) -> list[str]:
    """Remove what of ``lab`` is found on ``host`` by its label and names, whatever the
    record says (`cleanup --hosts` on a host that was lost while the lab was deleted):
    its containers and their volumes, its OVS bridges, its interfaces (those the helper
    lists for the lab, and ``names``), its parents' state directories."""
    removed = []
    volumes = _volumes(lab, host)
    for c in _lab_containers(lab, host):
        if not dry_run:
            with contextlib.suppress(docker.errors.NotFound):
                host.engine.api.remove_container(c["Id"], v=True, force=True)
        removed.append(f"{host.name}: container {c['Names'][0].lstrip('/')}")
    for volume in volumes:
        if not dry_run:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                host.engine.volumes.get(volume).remove(force=True)
        removed.append(f"{host.name}: volume {volume[:12]}")
    for bridge, ids in sorted(host.ovs.bridges().items()):
        if ids.get(LAB_ID) == lab:
            if not dry_run:
                host.ovs.del_bridge(bridge)
            removed.append(f"{host.name}: OVS bridge {bridge}")
    interfaces = sorted(set(host.helper.call("link.list", lab=lab))
                        | {n for n in names if n.startswith(f"{lab}-")})
    if interfaces:
        gone = ([n for n, there in host.helper.call("link.exists", names=interfaces).items()
                 if there] if dry_run
                else host.helper.call("link.delete", lab=lab, names=interfaces))
        removed += [f"{host.name}: interface {n}" for n in sorted(gone)]
    directories = sorted(host.helper.call("state.list", lab=lab))
    if directories:
        gone = directories if dry_run else host.helper.call("state.remove", lab=lab,
                                                            names=directories)
        removed += [f"{host.name}: directory {d}/" for d in gone]
    return removed


def _lab_containers(lab: str, host: HostHandle) -> list[dict]:
    """The lab's containers on ``host`` as the engine lists them: one call, no inspect per
    container (Swarm removes its tasks' containers meanwhile: an inspect would 404)."""
    return host.engine.api.containers(all=True, filters={"label": f"{LAB_ID}={lab}"})


def _volumes(lab: str, host: HostHandle) -> list[str]:
    return [m["Name"] for c in _lab_containers(lab, host)
            for m in c.get("Mounts") or [] if m.get("Type") == "volume"]


def _wait_containers_gone(lab: str, host: HostHandle, dry_run: bool, timeout: float = 60):
    """The lab's containers on ``host`` still there once Swarm had ``timeout`` seconds to
    stop its removed services' tasks (a dry run does not wait)."""
    deadline = time.monotonic() + (0 if dry_run else timeout)
    while True:
        left = _lab_containers(lab, host)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.3)
