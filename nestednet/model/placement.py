"""Which host each node of a multi-host lab runs on.

Pure: a hosts file (validated against nestednet/schemas/hosts.schema.json), `--place
n1=hostA` pins, and a strategy (`spread`: fill the hosts evenly, relative to their
capacity; `packed`: fill each host up to its capacity before the next) give a
`Placement`, node number -> host name. The runtime only reads the result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from nestednet.errors import UsageError
from nestednet.model import topology as topo
from nestednet.model.scenario import Problems, check_against_schema

STRATEGIES = ("spread", "packed")
DEFAULT_STRATEGY = "spread"


@dataclass(frozen=True)
class Host:
    """One machine of the lab: a Swarm node with its own engine and Open vSwitch."""

    name: str
    address: str
    """Underlay IPv4 address the other hosts reach (the tunnels' remote)."""
    engine: str | None = None
    """Docker engine URL from the CLI's machine; None: reached through Swarm only."""
    ovsdb: str | None = None
    capacity: int | None = None
    """At most this many nodes; None: no limit."""
    emulated: str | None = None
    """A host emulated on this machine: the name of its container in this machine's
    engine. Only the test harness reads it (to find and prepare its containers); labs
    reach every host the same way, through its helper (nestednet.hostd)."""


@dataclass(frozen=True)
class Tls:
    """The CLI machine's side of SSL sessions with the hosts' OVSDB and OpenFlow
    listeners: PEM files on this machine (hosts file `ssl`). The hosts hold their own
    key and certificate, signed by the same CA (docs/multihost.md, "Preparing a host")."""

    private_key: str
    certificate: str
    ca_cert: str


@dataclass(frozen=True)
class HostSet:
    hosts: tuple[Host, ...]
    vni: int | None = None
    openflow_port: int | None = None
    """The TCP port every main bridge of a lab listens on for OpenFlow; None: derived
    from the lab name (nestednet.model.tunnels.openflow_port)."""
    ssl: Tls | None = None
    """Given: OpenFlow sessions with the hosts are SSL (their bridges listen with
    `pssl:`), and so must be their `ovsdb` remotes (`ssl:`), and the per-host helper
    takes only TLS clients with a certificate of the same PKI."""
    hostd_port: int | None = None
    """Where every host's helper listens (nestednet.hostd); None: its default."""
    state_dir: str | None = None
    """The directory on every host holding the parents' state directories and the
    helper's PKI files; None: the helper's default."""
    insecure: bool = False
    """Without `ssl`: the file says plainly that the hosts' helpers (root services) and
    OVSDB are reached over plain TCP with no authentication (hosts file `insecure`).
    Without either, the helper is neither started nor used."""

    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def named(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise UsageError(f"no host named {name!r}", hint=f"hosts: {', '.join(self.names())}")

    def index(self, name: str) -> int:
        return self.names().index(name)


@cache
def schema() -> dict[str, Any]:
    text = resources.files("nestednet.schemas").joinpath("hosts.schema.json").read_text()
    return json.loads(text)


def hosts_from_doc(doc: Any, source: str = "hosts file") -> HostSet:
    """A HostSet from a parsed hosts document; every problem located, exit 2."""
    problems = Problems(source)
    check_against_schema(doc, schema(), problems)
    problems.raise_if_any(hint="the format is nestednet/schemas/hosts.schema.json")
    seen_names: dict[str, int] = {}
    seen_addresses: dict[str, int] = {}
    for i, item in enumerate(doc["hosts"]):
        for key, seen in (("name", seen_names), ("address", seen_addresses)):
            if item[key] in seen:
                problems.add(["hosts", i, key], f"{item[key]!r} is also host "
                             f"#{seen[item[key]] + 1}'s {key}")
            seen.setdefault(item[key], i)
    ssl = doc.get("ssl")
    for i, item in enumerate(doc["hosts"]):
        remote = item.get("ovsdb", "")
        if ssl is not None and remote.startswith("tcp:"):
            problems.add(["hosts", i, "ovsdb"], f"{remote!r} is plain TCP while the file "
                         "gives `ssl`: write ssl:IP:PORT")
        if ssl is None and remote.startswith("ssl:"):
            problems.add(["hosts", i, "ovsdb"], f"{remote!r} needs the file's `ssl` (the "
                         "CLI machine's key, certificate and CA certificate)")
    problems.raise_if_any()
    return HostSet(tuple(Host(h["name"], h["address"], h.get("engine"), h.get("ovsdb"),
                              h.get("capacity"), h.get("emulated")) for h in doc["hosts"]),
                   doc.get("vni"), doc.get("openflow_port"),
                   Tls(ssl["private_key"], ssl["certificate"], ssl["ca_cert"])
                   if ssl is not None else None, doc.get("hostd_port"), doc.get("state_dir"),
                   insecure=bool(doc.get("insecure", False)))


def load_hosts(path: Path) -> HostSet:
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"--hosts {path}: cannot read it ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"--hosts {path}: not JSON: line {exc.lineno} column {exc.colno}: "
                         f"{exc.msg}") from None
    return hosts_from_doc(doc, f"--hosts {path}")


def parse_pins(items: Iterable[str], shape: topo.Shape, hosts: HostSet) -> dict[int, str]:
    """`--place n1=hostA` options as node number -> host name."""
    pins: dict[int, str] = {}
    for item in items:
        node, sep, host = item.partition("=")
        if not sep or not node or not host:
            raise UsageError(f"--place {item!r}: write NODE=HOST, e.g. n1={hosts.names()[0]}")
        try:
            number = shape.check_node(node.strip())
            hosts.named(host.strip())
        except UsageError as exc:
            raise UsageError(f"--place {item!r}: {exc}", hint=exc.hint) from None
        if number in pins and pins[number] != host.strip():
            raise UsageError(f"--place {item!r}: {node} is already placed on {pins[number]}")
        pins[number] = host.strip()
    return pins


Placement = dict[int, str]


def place(shape: topo.Shape, hosts: HostSet, strategy: str = DEFAULT_STRATEGY,
          pins: Mapping[int, str] | None = None) -> Placement:
    """Node number -> host name for every node. Pinned nodes first, then the rest in
    node order: `spread` takes the host with room that has the fewest nodes (ties by
    host order), `packed` the first host with room."""
    if strategy not in STRATEGIES:
        raise UsageError(f"unknown placement {strategy!r}", hint=f"one of {', '.join(STRATEGIES)}")
    pins = dict(pins or {})
    load = {h.name: 0 for h in hosts.hosts}
    result: Placement = {}
    for node in sorted(pins):
        result[node] = hosts.named(pins[node]).name
        load[pins[node]] += 1
    for host in hosts.hosts:
        if host.capacity is not None and load[host.name] > host.capacity:
            raise UsageError(f"--place puts {load[host.name]} nodes on {host.name}, whose "
                             f"capacity is {host.capacity}")
    for node in shape.node_numbers():
        if node in result:
            continue
        room = [h for h in hosts.hosts if h.capacity is None or load[h.name] < h.capacity]
        if not room:
            total = sum(h.capacity or 0 for h in hosts.hosts)
            raise UsageError(f"{shape.nodes} nodes do not fit these hosts (capacity {total} "
                             "in all)", hint="add hosts or raise their capacity")
        if strategy == "packed":
            chosen = room[0]
        else:
            chosen = min(room, key=lambda h: (load[h.name], hosts.index(h.name)))
        result[node] = chosen.name
        load[chosen.name] += 1
    return dict(sorted(result.items()))


def nodes_on(placement: Mapping[int, str], host: str) -> list[int]:
    return sorted(n for n, h in placement.items() if h == host)


def hosts_used(placement: Mapping[int, str], hosts: Sequence[Host]) -> list[Host]:
    used = set(placement.values())
    return [h for h in hosts if h.name in used]


def hosts_doc(hosts: HostSet) -> dict[str, Any]:
    """A HostSet as a hosts document (what `hosts_from_doc` reads back)."""
    items = [{k: v for k, v in vars(h).items() if v is not None} for h in hosts.hosts]
    return {"hosts": items, **({"vni": hosts.vni} if hosts.vni is not None else {}),
            **({"openflow_port": hosts.openflow_port}
               if hosts.openflow_port is not None else {}),
            **({"ssl": vars(hosts.ssl)} if hosts.ssl is not None else {}),
            **({"hostd_port": hosts.hostd_port} if hosts.hostd_port is not None else {}),
            **({"state_dir": hosts.state_dir} if hosts.state_dir is not None else {}),
            **({"insecure": True} if hosts.insecure else {})}
