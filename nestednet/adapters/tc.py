"""The tc executor: performs tc plans (nestednet.model.tcplan) over netlink (pyroute2)
and reads the kernel's tc state back.

Thin on purpose: it knows pyroute2's call shapes and the kernel's answers, not
links. It only ever touches the root qdisc with the shaping tree's handle (1:) on the
ports it is given; a port whose root qdisc is someone else's is refused, not
replaced. Its users are linkemu and the labs' inter-node links (nestednet.lab.shaping);
``owner`` names the caller in messages.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from ipaddress import IPv4Address
from typing import Any

from pyroute2 import IPRoute, NetlinkError
from pyroute2.ethtool import Ethtool
from pyroute2.netlink import NETLINK_ROUTE, NLM_F_ACK, NLM_F_REQUEST, NLMSG_ERROR
from pyroute2.netlink.rtnl import RTM_NEWQDISC, RTM_NEWTCLASS
from pyroute2.netlink.rtnl.tcmsg import plugins as tc_plugins
from pyroute2.netlink.rtnl.tcmsg import tcmsg
from pyroute2.netlink.rtnl.tcmsg.common import calc_xmittime, tick_in_usec

from nestednet.adapters import netlink
from nestednet.errors import EnvironmentProblem
from nestednet.model.tcplan import ROOT_HANDLE, TcOp

OUR_ROOT = 0x10000
DEFAULT_ROOT_KINDS = ("noqueue", "pfifo_fast", "mq", "fq_codel", "fq", "pfifo")
"""What a port's root looks like when nobody configured it (handle 0:, kernel default)."""
NETNS_DIR = "/var/run/netns"
OFFLOADS = ("tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-generic-segmentation",
            "rx-gro")
"""TSO/GSO/GRO turned off: shapers and netem would otherwise see 64 KB super-packets."""


def _netem_rate_shim() -> None:
    """Let netem take a ``rate`` (tcplan's keep-order mode) through pyroute2 0.9.

    pyroute2 puts a ``rate`` keyword into netem's TCA_OPTIONS (right) and leaves it in
    the request too, where it is encoded as the qdisc's TCA_RATE estimator and fails
    ("object of type 'int' has no len()"). Its HTB, TBF and classifier plugins drop
    it in ``fix_request``; netem has none, so it gets the same one line.
    """
    from pyroute2.netlink.rtnl.tcmsg import sched_netem

    if not hasattr(sched_netem, "fix_request"):
        def fix_request(request: dict) -> None:
            request.pop("rate", None)

        sched_netem.fix_request = fix_request  # type: ignore[attr-defined]


_netem_rate_shim()


def handle_int(handle: str | int) -> int:
    if isinstance(handle, int):
        return handle
    major, minor = (int(x or "0", 16) for x in handle.split(":"))
    return (major << 16) | minor


def handle_str(value: int) -> str:
    return f"{value >> 16:x}:{value & 0xFFFF:x}"


@contextlib.contextmanager
def rtnl(netns: str | None) -> Iterator[IPRoute]:
    """An rtnetlink socket in ``netns`` (None: ours); never creates the namespace."""
    if netns is not None and not os.path.exists(os.path.join(NETNS_DIR, netns)):
        raise EnvironmentProblem(f"network namespace {netns} does not exist",
                                 hint="start the emulator (e.g. `linkemu testbed up`) first")
    with netlink.route(netns) as ipr:
        yield ipr


def port_index(ipr: IPRoute, port: str) -> int:
    found = ipr.link_lookup(ifname=port)
    if not found:
        raise EnvironmentProblem(f"emulator port {port} does not exist",
                                 hint="check the links file's emulator section, or bring the "
                                 "emulator up (`linkemu testbed up`)")
    return found[0]


def root_qdisc(ipr: IPRoute, index: int) -> tuple[str, int]:
    """(kind, handle) of the port's root qdisc."""
    return _root_of(ipr.get_qdiscs(index))


def _root_of(qdisc_msgs: Iterable[Any]) -> tuple[str, int]:
    """(kind, handle) of the root among one port's qdisc messages."""
    for msg in qdisc_msgs:
        if msg["parent"] == 0xFFFFFFFF:
            return msg.get_attr("TCA_KIND"), msg["handle"]
    return "noqueue", 0


def _kwargs(op: TcOp) -> dict[str, Any]:
    params = dict(op.params)
    for key in ("parent", "target"):
        if key in params:
            params[key] = handle_int(params[key])
    return params


def _run(ipr: IPRoute, index: int, op: TcOp) -> None:
    try:
        ipr.tc(op.command, op.kind, index=index, handle=handle_int(op.handle), **_kwargs(op))
    except NetlinkError as exc:
        raise EnvironmentProblem(
            f"tc {op.command} {op.kind} {op.handle} on {op.port} failed: "
            f"{os.strerror(exc.code)} ({op.what})") from exc


def check_ports(netns: str | None, ports: Sequence[str], ours: Sequence[str],
                owner: str = "linkemu") -> dict[str, str]:
    """Root qdisc kind per port; refuse ports whose root belongs to someone else.

    ``ours`` lists ports where the caller's records say its tree is installed.
    """
    found = {}
    with rtnl(netns) as ipr:
        for port in ports:
            kind, handle = root_qdisc(ipr, port_index(ipr, port))
            if handle != 0 and not (handle == OUR_ROOT and port in ours):
                raise EnvironmentProblem(
                    f"{port} already has a root qdisc {kind} {handle_str(handle)} that "
                    f"{owner} did not make; not replacing it",
                    hint=f"remove it first if it is stale (tc qdisc del dev {port} root)")
            found[port] = kind
    return found


def apply(ops: Sequence[TcOp], netns: str | None, ports: Sequence[str]) -> dict[str, int]:
    """Build the trees in ``ops`` on ``ports``; on any failure remove them again.

    Any earlier linkemu tree on these ports is removed first (check_ports has made
    sure it is ours), so `apply` twice gives the second file's tree. Returns the
    ports' indexes (for later `change_batch` calls).
    """
    with rtnl(netns) as ipr:
        indexes = {port: port_index(ipr, port) for port in ports}
        for port in ports:
            _delete_root(ipr, indexes[port])
        try:
            for op in ops:
                _run(ipr, indexes[op.port], op)
        except BaseException:
            for port in ports:
                _delete_root(ipr, indexes[port])
            raise
    return indexes


def build(ops: Sequence[TcOp], netns: str | None, ports: Sequence[str], ours: Sequence[str],
          owner: str) -> dict[str, int]:
    """`apply` for ports expected to be bare, without reading them first.

    Reading a port's qdiscs is a dump of every qdisc in the namespace (60 ms with a
    48-node lab's 500 interfaces), so the trees are added straight away. A port that
    turns out to hold a root qdisc (EEXIST) sends the batch the careful way:
    `check_ports` (refusing a root that is not ``ours``) then `apply`. On any other
    failure the trees this call made are removed again. Returns the ports' indexes.
    """
    made: list[int] = []
    with rtnl(netns) as ipr:
        indexes = {port: port_index(ipr, port) for port in ports}
        try:
            for op in ops:
                _run(ipr, indexes[op.port], op)
                if op.handle == ROOT_HANDLE and op.command == "add":
                    made.append(indexes[op.port])
        except EnvironmentProblem as exc:
            for index in made:
                _delete_handle(ipr, index)
            cause = exc.__cause__
            if not (isinstance(cause, NetlinkError) and cause.code == errno.EEXIST):
                raise
        else:
            return indexes
    check_ports(netns, ports, ours, owner)
    return apply(ops, netns, ports)


def _delete_handle(ipr: IPRoute, index: int) -> bool:
    """Delete the root qdisc 1: without reading first; False when there was none."""
    try:
        ipr.tc("del", index=index, handle=OUR_ROOT, root=True)
    except NetlinkError as exc:
        if exc.code in (errno.ENOENT, errno.EINVAL):
            return False
        raise
    return True


def remove_trees(netns: str | None, ports: Sequence[str]) -> list[str]:
    """`remove` for ports whose root 1: is known to be the caller's (no read first)."""
    return _each_port(netns, ports, _delete_handle)


def _each_port(netns: str | None, ports: Sequence[str],
               delete: Callable[[IPRoute, int], bool]) -> list[str]:
    """``delete`` on each port that still exists; the ports where it removed a tree."""
    with rtnl(netns) as ipr:
        return [port for port in ports
                if (found := ipr.link_lookup(ifname=port)) and delete(ipr, found[0])]


_CHANGE_TYPES = {"change": RTM_NEWQDISC, "change-class": RTM_NEWTCLASS}
BATCH_BYTES = 32 * 1024
BATCH_REQUESTS = 64
"""Requests per write: the write must fit the socket's send buffer, and the kernel
queues every request's ACK before we read any, so they must fit its receive buffer
(each ACK takes about 1 KiB of it; the default is 208 KiB). Past either the kernel
drops ACKs (ENOBUFS)."""
TC_LINKLAYER_ETHERNET = 1
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 6, 7
U32_MAX = (1 << 32) - 1
_NLMSG_HEADER = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BxxxiIII")
_HTB_OPT = struct.Struct("=BBHhHI" "BBHhHI" "IIIII")
"""struct tc_htb_opt: two tc_ratespecs (rate, ceil), buffer, cbuffer, quantum, level, prio."""


def _attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    return struct.pack("=HH", 4 + len(payload), kind) + payload + bytes(-len(payload) % 4)


def _htb_class_change(op: TcOp, index: int, seq: int) -> bytes:
    """An HTB class change request with no rate tables (RTAB/CTAB).

    pyroute2 computes and encodes two 256-entry tables per class in Python, about
    1 ms a class, which made a step's changes cost 85-270 ms. The kernel needs them
    only for a rate spec whose link layer is unknown (it detects the link layer from
    the table; net/sched/sch_htb.c, ``linklayer == TC_LINKLAYER_UNAWARE``); a spec
    that says Ethernet is used as it is, its transmit times computed by the kernel
    (psched_ratecfg_precompute). Rates of 2^32 bytes/s and more go in RATE64/CEIL64.
    Same parameters as pyroute2's encoding otherwise (sched_htb.get_class_parameters).
    """
    params = _kwargs(op)
    rate = params["rate"]
    ceil = params.get("ceil") or rate
    parms = _HTB_OPT.pack(
        0, TC_LINKLAYER_ETHERNET, 0, 0, 0, min(rate, U32_MAX),
        0, TC_LINKLAYER_ETHERNET, 0, 0, 0, min(ceil, U32_MAX),
        calc_xmittime(rate, params["burst"]), calc_xmittime(ceil, params["cburst"]),
        params.get("quantum", 0), 0, params.get("prio", 0))
    options = _attr(TCA_HTB_PARMS, parms)
    if rate > U32_MAX:
        options += _attr(TCA_HTB_RATE64, struct.pack("=Q", rate))
    if ceil > U32_MAX:
        options += _attr(TCA_HTB_CEIL64, struct.pack("=Q", ceil))
    body = (_TCMSG.pack(socket.AF_UNSPEC, index, handle_int(op.handle), params["parent"], 0)
            + _attr(TCA_KIND, b"htb\0") + _attr(TCA_OPTIONS, options))
    return _NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(body), RTM_NEWTCLASS,
                              NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


def _encoded(op: TcOp, index: int, seq: int) -> bytes:
    """One change request: HTB classes packed here (`_htb_class_change`), anything else
    as pyroute2 would send it (its plugins encode the options)."""
    if op.kind == "htb" and op.command == "change-class":
        return _htb_class_change(op, index, seq)
    kwargs = _kwargs(op)
    plugin = tc_plugins[op.kind]
    context = {"kind": op.kind, "index": index, "handle": handle_int(op.handle), **kwargs}
    if op.command.endswith("class"):
        options = plugin.get_class_parameters(dict(context))
    else:
        options = plugin.get_parameters(dict(context))
    msg = tcmsg()
    msg["index"] = index
    msg["handle"] = handle_int(op.handle)
    msg["parent"] = kwargs["parent"]
    msg["attrs"] = [["TCA_KIND", op.kind], ["TCA_OPTIONS", options]]
    msg["header"]["type"] = _CHANGE_TYPES[op.command]
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK
    msg["header"]["sequence_number"] = seq
    msg.encode()
    return bytes(msg.data[:msg["header"]["length"]])


def change_batch(ops: Sequence[TcOp], netns: str | None, indexes: dict[str, int]) -> None:
    """`change` as one netlink write: every request in one message, the ACKs read after.

    Each pyroute2 request costs about 2 ms (its event loop) and each name lookup
    another 2 ms; a step of a 48-node run changes ~100 classes, so the requests are
    encoded here (`_encoded`: HTB classes packed, about 4 us each) and sent together,
    the kernel handling them in a few system calls (BATCH_REQUESTS each). ``indexes``
    maps each port to its ifindex (the caller keeps them). Raises EnvironmentProblem
    naming the first request the kernel refused.
    """
    if not ops:
        return
    chunks: list[list[bytes]] = [[]]
    size = 0
    for seq, op in enumerate(ops, 1):
        message = _encoded(op, indexes[op.port], seq)
        if size + len(message) > BATCH_BYTES or len(chunks[-1]) == BATCH_REQUESTS:
            chunks.append([])
            size = 0
        chunks[-1].append(message)
        size += len(message)

    def send() -> dict[int, int]:
        acks: dict[int, int] = {}
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as sock:
            sock.bind((0, 0))
            for chunk in chunks:
                sock.send(b"".join(chunk))
                expected = len(acks) + len(chunk)
                while len(acks) < expected:
                    data = sock.recv(1 << 16)
                    offset = 0
                    while offset < len(data):
                        length, kind, _, seq, _ = struct.unpack_from("=IHHII", data, offset)
                        if kind == NLMSG_ERROR:
                            acks[seq] = -struct.unpack_from("=i", data, offset + 16)[0]
                        offset += (length + 3) & ~3
        return acks

    try:
        acks = send() if netns is None else netlink.in_namespace(netns, send)
    except OSError as exc:
        raise EnvironmentProblem(f"tc changes on {len(ops)} objects failed: {exc}") from exc
    failed = sorted(seq for seq, code in acks.items() if code)
    if failed:
        op = ops[failed[0] - 1]
        raise EnvironmentProblem(f"tc {op.command} {op.kind} {op.handle} on {op.port} failed: "
                                 f"{os.strerror(acks[failed[0]])} ({op.what})")


def port_indexes(netns: str | None, ports: Sequence[str]) -> dict[str, int]:
    with rtnl(netns) as ipr:
        return {port: port_index(ipr, port) for port in ports}


def change(ops: Sequence[TcOp], netns: str | None) -> None:
    """Execute in-place changes (`change`/`change-class`) on existing objects: the ports'
    indexes looked up, then `change_batch`."""
    if ops:
        change_batch(ops, netns, port_indexes(netns, sorted({op.port for op in ops})))


def _delete_root(ipr: IPRoute, index: int) -> bool:
    kind, handle = root_qdisc(ipr, index)
    if handle != OUR_ROOT or kind not in ("hfsc", "htb"):
        return False
    try:
        ipr.tc("del", index=index, handle=OUR_ROOT, root=True)
    except NetlinkError as exc:
        if exc.code != 2:
            raise
    return True


def remove(netns: str | None, ports: Sequence[str]) -> list[str]:
    """Delete linkemu's root qdisc (and with it its classes, netems, filters) per port.

    Returns the ports that had one. Ports that vanished are skipped: nothing to undo.
    """
    return _each_port(netns, ports, _delete_root)


def disable_offloads(netns: str | None, ports: Sequence[str]) -> dict[str, list[str]]:
    """Turn TSO/GSO/GRO off on ``ports`` (pyroute2's ethtool ioctl, in the port's netns).

    Returns the features that were switched off per port.
    """
    changed: dict[str, list[str]] = {}
    ethtool = _ethtool(netns)
    try:
        for port in ports:
            features = ethtool.get_features(port)
            turned = []
            for name in OFFLOADS:
                feature = features.features.get(name)
                if feature is not None and feature.enable and feature.available:
                    feature.enable = False
                    turned.append(name)
            if turned:
                ethtool.set_features(port, features)
            changed[port] = turned
    except OSError as exc:
        raise EnvironmentProblem(f"could not turn offloads off on {ports}: {exc}") from exc
    finally:
        ethtool.close()
    return changed


def _ethtool(netns: str | None) -> Ethtool:
    """An Ethtool whose sockets live in ``netns``: its ioctls and genetlink requests act
    on that namespace's interfaces, whichever thread uses it afterwards."""
    return Ethtool() if netns is None else netlink.in_namespace(netns, Ethtool)


def offloads(netns: str | None, port: str) -> dict[str, bool]:
    ethtool = _ethtool(netns)
    try:
        features = ethtool.get_features(port).features
        return {name: features[name].enable for name in OFFLOADS if name in features}
    finally:
        ethtool.close()


# --- reading the kernel's state back ------------------------------------------------


def _ticks_to_us(ticks: int) -> int:
    return round(ticks / tick_in_usec)


def _u32_to_pct(value: int) -> float:
    return round(value * 100 / (2**32 - 1), 4)


def _qdisc(msg: Any) -> dict[str, Any]:
    kind = msg.get_attr("TCA_KIND")
    out: dict[str, Any] = {"kind": kind, "handle": handle_str(msg["handle"]),
                           "parent": "root" if msg["parent"] == 0xFFFFFFFF
                           else handle_str(msg["parent"])}
    opts = msg.get_attr("TCA_OPTIONS")
    if kind == "netem" and opts is not None:
        out.update(delay_us=_ticks_to_us(opts["delay"]), jitter_us=_ticks_to_us(opts["jitter"]),
                   loss_pct=_u32_to_pct(opts["loss"]), limit=opts["limit"])
    elif kind in ("hfsc", "htb") and opts is not None:
        if kind == "hfsc":
            out["default"] = f"1:{opts['defcls']:x}"
        else:
            init = opts.get_attr("TCA_HTB_INIT") or {}
            out["default"] = f"1:{init.get('defcls', 0):x}"
    stats = msg.get_attr("TCA_STATS")
    if stats is not None:
        out["sent_packets"] = stats.get("packets")
        out["dropped"] = stats.get("drop")
    return out


def _class(msg: Any) -> dict[str, Any]:
    kind = msg.get_attr("TCA_KIND")
    out: dict[str, Any] = {"kind": kind, "classid": handle_str(msg["handle"]),
                           "parent": "root" if msg["parent"] == 0xFFFFFFFF
                           else handle_str(msg["parent"])}
    stats = msg.get_attr("TCA_STATS")
    if stats is not None:
        out.update(sent_packets=stats.get("packets"), dropped=stats.get("drop"),
                   backlog_bytes=stats.get("backlog"), backlog_packets=stats.get("qlen"))
    opts = msg.get_attr("TCA_OPTIONS")
    if opts is None:
        return out
    if kind == "htb":
        parms = opts.get_attr("TCA_HTB_PARMS") or {}
        rate = opts.get_attr("TCA_HTB_RATE64") or parms.get("rate", 0)
        ceil = opts.get_attr("TCA_HTB_CEIL64") or parms.get("ceil", 0)
        out.update(rate_bps=rate * 8, ceil_bps=ceil * 8)
    elif kind == "hfsc":
        for key, name in (("TCA_HFSC_RSC", "rt"), ("TCA_HFSC_FSC", "ls"),
                          ("TCA_HFSC_USC", "ul")):
            curve = opts.get_attr(key)
            if curve is not None:
                out[f"{name}_bps"] = curve["m2"] * 8
        out["rate_bps"] = out.get("ul_bps", out.get("rt_bps"))
    return out


def _u32_keys(sel: Any) -> list[dict[str, Any]]:
    """Decode tc_u32_sel's keys from the raw attribute (pyroute2 mis-decodes them)."""
    raw = bytes(sel.data[sel.offset + 4: sel.offset + sel.length])
    nkeys = raw[2]
    keys = []
    for i in range(nkeys):
        mask, val = struct.unpack_from(">II", raw, 16 + 16 * i)
        (off,) = struct.unpack_from("=i", raw, 16 + 16 * i + 8)
        keys.append({"value": val, "mask": mask, "offset": off})
    return keys


def _filter(msg: Any) -> dict[str, Any] | None:
    opts = msg.get_attr("TCA_OPTIONS")
    if msg.get_attr("TCA_KIND") != "u32" or opts is None:
        return None
    classid = opts.get_attr("TCA_U32_CLASSID")
    sel = opts.get_attr("TCA_U32_SEL")
    if classid is None or sel is None:
        return None
    out: dict[str, Any] = {"kind": "u32", "prio": msg["info"] >> 16,
                           "handle": f"{msg['handle']:x}", "target": handle_str(classid)}
    for key in _u32_keys(sel):
        if key["mask"] == 0xFFFFFFFF and key["offset"] in (12, 16):
            name = "src" if key["offset"] == 12 else "dst"
            out[name] = str(IPv4Address(key["value"]))
    return out


def _port_state(ipr: IPRoute, port: str, index: int | None, qdisc_msgs: list) -> dict[str, Any]:
    if index is None:
        return {"port": port, "exists": False}
    qdiscs = [_qdisc(m) for m in qdisc_msgs]
    root_kind, root_handle = _root_of(qdisc_msgs)
    classes = [_class(m) for m in ipr.get_classes(index)]
    filters = []
    if root_handle:
        filters = [f for f in (_filter(m) for m in ipr.get_filters(index, parent=root_handle))
                   if f]
    return {"port": port, "exists": True, "root": {"kind": root_kind,
                                                    "handle": handle_str(root_handle)},
            "qdiscs": qdiscs, "classes": classes, "filters": filters}


def read(netns: str | None, ports: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The kernel's tc objects on ``ports``, decoded to plain values (for `show`).

    One dump of the links and one of the qdiscs serve every port (a lookup per port
    dumps them all again: quadratic on a lab with hundreds of ports); classes and
    filters are dumped per device by the kernel itself."""
    with rtnl(netns) as ipr:
        indexes = {link.get_attr("IFLA_IFNAME"): link["index"] for link in ipr.get_links()}
        qdiscs: dict[int, list] = {}
        for msg in ipr.get_qdiscs():
            qdiscs.setdefault(msg["index"], []).append(msg)
        return {port: _port_state(ipr, port, index, qdiscs.get(index, []))
                for port, index in ((p, indexes.get(p)) for p in ports)}


def snapshot(netns: str | None, ports: Sequence[str]) -> dict[str, Any]:
    """Root qdisc kinds/handles of ``ports``: what tests compare before and after."""
    with rtnl(netns) as ipr:
        out = {}
        for port in ports:
            found = ipr.link_lookup(ifname=port)
            out[port] = (root_qdisc(ipr, found[0]) if found else None)
        return out

