"""OpenFlow rules on OVS bridges: batches through `ovs-ofctl` on this machine's bridges,
and `Channel`, a persistent OpenFlow 1.3 session, for callers that change flows often
or reach a bridge over the network.

Neither python-ovs nor ovsdbapp speaks OpenFlow (they speak OVSDB), so one-host labs
use `ovs-ofctl --bundle add-flows BRIDGE -`: one process per batch, any number of adds
and deletes applied atomically (about 9 ms per call here). `Channel` talks OpenFlow
itself, with os-ken's message classes, over a bridge's management socket or over TCP
or SSL to a listener the bridge was given (`Listener`: how a lab over several hosts
reaches its hosts' main bridges, docs/multihost.md). Every flow carries a cookie naming
what it belongs to, so removal deletes exactly those flows and nothing else.
"""

from __future__ import annotations

import functools
import re
import select
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from nestednet.adapters.ovsdb import HOST_RUNDIR
from nestednet.errors import EnvironmentProblem
from nestednet.model.placement import Tls

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


def host_flow_line(cookie: int, in_port: int, out_port: int, *, match_tag: int | None = None,
                   push_tag: int | None = None) -> str:
    """One rule of a multi-host link (nestednet.model.tunnels.HostFlow): into a tunnel
    with an 802.1Q tag pushed, or out of one matching and popping it."""
    match = f"in_port={in_port}"
    actions = f"output:{out_port}"
    if match_tag is not None:
        match += f",dl_vlan={match_tag}"
        actions = f"pop_vlan,{actions}"
    if push_tag is not None:
        actions = f"push_vlan:0x8100,set_field:{0x1000 | push_tag}->vlan_vid,{actions}"
    return f"add cookie={cookie:#x},priority={LINK_PRIORITY},{match},actions={actions}"


def _dump_flows(bridge: str) -> str:
    done = subprocess.run([_ofctl(), "-O", PROTOCOL, "--no-names", "dump-flows", bridge],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvironmentProblem(f"ovs-ofctl dump-flows {bridge} failed: "
                                 f"{done.stderr.strip()[:300]}")
    return done.stdout


def cookies(bridge: str) -> set[int]:
    """The cookies of every flow on ``bridge`` (``bridge`` may be an ovs-ofctl target)."""
    return {int(m.group(1), 16)
            for m in re.finditer(r"cookie=(0x[0-9a-f]+)", _dump_flows(bridge))}


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
    flows = []
    for line in _dump_flows(bridge).splitlines():
        match = _FLOW_RE.search(line)
        if match:
            cookie, priority, in_port, output = match.groups()
            flows.append(Flow(int(cookie, 16), int(in_port), int(output), int(priority)))
    return flows


@dataclass(frozen=True)
class Listener:
    """A bridge's OpenFlow listener on the network: the bridge is given `passive()` as a
    controller target (ovs-vswitchd listens there), sessions connect to `address:port`.
    With ``tls`` the listener is SSL (`pssl:`; the host's OVS holds its own key and
    certificate in its SSL table) and sessions present this machine's certificate."""

    address: str
    port: int
    tls: Tls | None = None

    def passive(self) -> str:
        """The bridge's controller target: listen on the host's address only."""
        return f"{'pssl' if self.tls else 'ptcp'}:{self.port}:{self.address}"

    def __str__(self) -> str:
        return f"{'ssl' if self.tls else 'tcp'}:{self.address}:{self.port}"


def tls_context(tls: Tls) -> ssl.SSLContext:
    """A client context as OVS's own clients use it: this machine's key and certificate,
    the peer's certificate checked against ``tls.ca_cert``, no host name check (OVS's
    certificates name switches and controllers, not addresses: `ovs-pki`)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_cert_chain(tls.certificate, tls.private_key)
        context.load_verify_locations(tls.ca_cert)
    except (OSError, ssl.SSLError) as exc:
        raise EnvironmentProblem(f"SSL files not usable ({tls.certificate}, {tls.private_key}, "
                                 f"{tls.ca_cert}): {exc}",
                                 hint="the hosts file's `ssl` names PEM files on this "
                                      "machine") from exc
    return context


Rule = tuple[int, int, int, int | None, int | None]
"""One rule of a multi-host link for `Channel.submit`: (cookie, in_port, out_port,
match_tag, push_tag), as `host_flow_line` writes it."""


class Template:
    """One shape of message as os-ken serializes it, with its varying fields written in
    place: the CA sends a flow-mod pair per link from its own thread, and building each
    with os-ken's classes took ~41 us here (~18 ms for the ~220 links of a 250-node
    step's first batch); copying these bytes and packing three fields takes ~2 us. Each
    field's offset is found by serializing the message with a distinct sentinel value in
    it, so the bytes are os-ken's own and a change in its layout fails here, not on the
    wire."""

    XID = 0x5A5B5C5D

    def __init__(self, message: object, fields: Mapping[str, tuple[str, int]]) -> None:
        """``message``: an os-ken message carrying each of ``fields``' sentinels (name ->
        (struct format, sentinel)); the xid is always a field, the first."""
        message.set_xid(self.XID)
        message.serialize()
        buf = bytes(message.buf)
        self._buf = buf
        self._at: list[tuple[str, int]] = []
        for name, (fmt, sentinel) in {"xid": ("!I", self.XID), **fields}.items():
            packed = struct.pack(fmt, sentinel)
            at = buf.find(packed)
            if at < 0 or buf.find(packed, at + 1) >= 0:
                raise RuntimeError(f"os-ken's {type(message).__name__} does not carry "
                                   f"{name} once where this template can find it")
            self._at.append((fmt, at))

    def encode(self, xid: int, *values: int) -> bytes:
        buf = bytearray(self._buf)
        for (fmt, at), value in zip(self._at, (xid, *values), strict=True):
            struct.pack_into(fmt, buf, at, value)
        return bytes(buf)


@dataclass(frozen=True)
class Packed:
    """A message to send as ``template`` with ``values`` (all its fields but the xid)."""

    template: Template
    values: tuple[int, ...]

    def encode(self, xid: int) -> bytes:
        return self.template.encode(xid, *self.values)


@functools.cache
def _os_ken() -> tuple[types.ModuleType, types.ModuleType, types.SimpleNamespace]:
    """os-ken's OpenFlow 1.3 definitions and parser, and a stand-in datapath for its
    message classes. Lazy: only these modules, which need no eventlet (os_ken_compat's
    shim imports eventlet, and a thread that imports eventlet cannot be joined)."""
    from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

    return (ofproto_v1_3, ofproto_v1_3_parser,
            types.SimpleNamespace(ofproto=ofproto_v1_3, ofproto_parser=ofproto_v1_3_parser))


def output_flow(cookie: int, in_port: int, out_port: int, match_tag: int | None = None,
                push_tag: int | None = None) -> object:
    """in_port -> out_port as an os-ken flow-mod; with tags, the rules `host_flow_line`
    writes (out of a tunnel: match the 802.1Q tag and pop it; into one: push a tag)."""
    ofp, p, dp = _os_ken()
    match = (p.OFPMatch(in_port=in_port) if match_tag is None else
             p.OFPMatch(in_port=in_port, vlan_vid=ofp.OFPVID_PRESENT | match_tag))
    actions: list = [p.OFPActionPopVlan()] if match_tag is not None else []
    if push_tag is not None:
        actions += [p.OFPActionPushVlan(0x8100),
                    p.OFPActionSetField(vlan_vid=ofp.OFPVID_PRESENT | push_tag)]
    actions.append(p.OFPActionOutput(out_port))
    return p.OFPFlowMod(dp, cookie=cookie, priority=LINK_PRIORITY, command=ofp.OFPFC_ADD,
                        match=match,
                        instructions=[p.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                                              actions)])


def delete_cookie(cookie: int, mask: int = (1 << 64) - 1) -> object:
    """An os-ken flow-mod deleting, in every table, the flows whose cookie matches."""
    ofp, p, dp = _os_ken()
    return p.OFPFlowMod(dp, cookie=cookie, cookie_mask=mask, table_id=ofp.OFPTT_ALL,
                        command=ofp.OFPFC_DELETE, out_port=ofp.OFPP_ANY,
                        out_group=ofp.OFPG_ANY)


@functools.cache
def link_templates() -> tuple[Template, Template]:
    """A link's flow (cookie, in_port, out_port) and a delete by exact cookie."""
    cookie, in_port, out_port = 0x1A2B3C4D5E6F7081, 0x0D1E2F31, 0x0E1F2A32
    return (Template(output_flow(cookie, in_port, out_port),
                     {"cookie": ("!Q", cookie), "in_port": ("!I", in_port),
                      "out_port": ("!I", out_port)}),
            Template(delete_cookie(cookie), {"cookie": ("!Q", cookie)}))


class Channel:
    """A persistent OpenFlow 1.3 session with one bridge, for callers that change flows often.

    The CA installs a batch of links per negotiation round; one `ovs-ofctl` process per
    batch costs ~9 ms, which dominated a 100-node step. This talks OpenFlow directly
    over the bridge's own management socket (<rundir>/<bridge>.mgmt) with os-ken's
    message classes: a batch is its flow-mods plus a barrier, in one write. ``submit``
    does not wait for the barrier's reply: the caller watches ``fileno`` and calls
    ``read``, which hands each batch's outcome to its callback, in submission order
    (the switch answers in order). ``change`` waits for its own batch.
    """

    def __init__(self, bridge: str, rundir: str = HOST_RUNDIR,
                 timeout: float = 10.0, *, listener: Listener | None = None,
                 dpid: int | None = None) -> None:
        """A session with ``bridge``: through its management socket in ``rundir``, or,
        given ``listener``, over TCP/SSL to it. Given ``dpid``, the switch must answer
        FEATURES with that datapath id: over the network a port names no bridge, and
        a session must not change another bridge's flows."""
        self._ofp, self._parser, self._dp = _os_ken()
        self._link_flow, self._cookie_delete = link_templates()
        self._lock = threading.RLock()
        self._xid = 0
        self._bundle_id = 0
        self._buffer = b""
        self._waiting: dict[int, Callable[[list[str]], None]] = {}
        """Barrier xid -> the callback of the batch it ends."""
        self._errors: list[str] = []
        """Error replies since the last barrier reply: they belong to the next one's batch."""
        self.bridge = bridge
        self._timeout = timeout
        where = str(listener) if listener else f"unix:{rundir}/{bridge}.mgmt"
        self.target = where
        try:
            self._sock = self._connect(bridge, rundir, listener, timeout)
        except (OSError, EnvironmentProblem) as exc:
            raise EnvironmentProblem(f"no OpenFlow session with bridge {bridge} at {where}: "
                                     f"{exc}") from exc
        try:
            self._send(self._parser.OFPHello(self._dp))
            kind, _, _ = self._receive()
            if kind != self._ofp.OFPT_HELLO:
                raise EnvironmentProblem(f"bridge {bridge} at {where} did not answer the "
                                         "OpenFlow HELLO")
            if dpid is not None:
                found = self.datapath_id()
                if found != dpid:
                    raise EnvironmentProblem(
                        f"the switch at {where} is not bridge {bridge}: datapath id "
                        f"{found:016x}, expected {dpid:016x}",
                        hint="another lab's bridge listens on that port: give this lab "
                             "its own `openflow_port` in the hosts file")
        except OSError as exc:
            self._sock.close()
            raise EnvironmentProblem(f"no OpenFlow session with bridge {bridge} at {where}: "
                                     f"{exc}") from exc
        except BaseException:
            self._sock.close()
            raise

    @staticmethod
    def _connect(bridge: str, rundir: str, listener: Listener | None,
                 timeout: float) -> socket.socket:
        if listener is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(f"{rundir}/{bridge}.mgmt")
            except OSError:
                sock.close()
                raise
            return sock
        sock = socket.create_connection((listener.address, listener.port), timeout=timeout)
        # Batches are small writes answered at once: no Nagle delay on them.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if listener.tls is None:
            return sock
        try:
            wrapped = tls_context(listener.tls).wrap_socket(sock)
        except BaseException:
            sock.close()
            raise
        wrapped.settimeout(timeout)
        return wrapped

    def close(self) -> None:
        self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()

    def in_flight(self) -> int:
        """Batches submitted whose outcome has not been read yet."""
        return len(self._waiting)

    def _send(self, *messages: object) -> int:
        """Send ``messages`` (os-ken's, or Packed) in one write (one wake-up of
        ovs-vswitchd); the last xid."""
        chunks = []
        for message in messages:
            self._xid += 1
            if isinstance(message, Packed):
                chunks.append(message.encode(self._xid))
                continue
            message.set_xid(self._xid)
            inner = getattr(message, "message", None)
            if inner is not None:  # a bundled message carries its bundle-add's xid
                inner.set_xid(self._xid)
            message.serialize()
            chunks.append(message.buf)
        self._sock.sendall(b"".join(chunks))
        return self._xid

    def _receive(self) -> tuple[int, int, bytes]:
        while (message := self._take()) is None:
            self._fill(block=True)
        return message

    def _fill(self, *, block: bool) -> bool:
        """Append what the switch sent to the buffer; False when nothing was there."""
        # Not MSG_DONTWAIT: Python waits out a socket's timeout before any recv.
        self._sock.settimeout(self._timeout if block else 0.0)
        try:
            chunk = self._sock.recv(65536)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            return False
        finally:
            self._sock.settimeout(self._timeout)
        if not chunk:
            raise EnvironmentProblem(f"bridge {self.bridge} closed the OpenFlow session")
        self._buffer += chunk
        return True

    def _take(self) -> tuple[int, int, bytes] | None:
        """The next whole message in the buffer (kind, xid, body), or None."""
        if len(self._buffer) < 8:
            return None
        _version, kind, length, xid = struct.unpack("!BBHI", self._buffer[:8])
        if len(self._buffer) < length:
            return None
        body, self._buffer = self._buffer[8:length], self._buffer[length:]
        return kind, xid, body

    def _dispatch(self) -> None:
        while (message := self._take()) is not None:
            self._handle(*message)

    def _handle(self, kind: int, xid: int, body: bytes) -> None:
        """One message from the switch: errors wait for their batch's barrier reply,
        echo requests are answered, a barrier reply completes its batch."""
        if kind == self._ofp.OFPT_ERROR:
            err_type, err_code = struct.unpack("!HH", body[:4])
            self._errors.append(f"xid {xid}: type {err_type} code {err_code}")
        elif kind == self._ofp.OFPT_ECHO_REQUEST:
            self._sock.sendall(struct.pack("!BBHI", self._ofp.OFP_VERSION,
                                           self._ofp.OFPT_ECHO_REPLY, 8 + len(body), xid)
                               + body)
        elif kind == self._ofp.OFPT_BARRIER_REPLY and xid in self._waiting:
            done, errors, self._errors = self._waiting.pop(xid), self._errors, []
            done(errors)

    def _request(self, message: object, reply_kind: int) -> list[bytes]:
        """Send ``message`` and return the bodies of its replies (several for a
        multipart reply), handling whatever else the switch sends meanwhile."""
        with self._lock:
            xid = self._send(message)
            bodies: list[bytes] = []
            while True:
                kind, got, body = self._receive()
                if got != xid:
                    self._handle(kind, got, body)
                    continue
                if kind == self._ofp.OFPT_ERROR:
                    err_type, err_code = struct.unpack("!HH", body[:4])
                    raise EnvironmentProblem(f"bridge {self.bridge} refused a request: "
                                             f"type {err_type} code {err_code}")
                if kind != reply_kind:
                    continue
                bodies.append(body)
                if kind != self._ofp.OFPT_MULTIPART_REPLY or \
                        not struct.unpack("!HH", body[:4])[1] & self._ofp.OFPMPF_REPLY_MORE:
                    return bodies

    def datapath_id(self) -> int:
        """The switch's datapath id (its FEATURES reply)."""
        body = self._request(self._parser.OFPFeaturesRequest(self._dp),
                             self._ofp.OFPT_FEATURES_REPLY)[0]
        return int(struct.unpack("!Q", body[:8])[0])

    def cookies(self) -> set[int]:
        """The cookies of every flow on the bridge (a flow-stats request over the session,
        what `cookies` reads through ovs-ofctl)."""
        ofp = self._ofp
        request = self._parser.OFPFlowStatsRequest(self._dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY,
                                                   ofp.OFPG_ANY, 0, 0, self._parser.OFPMatch())
        found: set[int] = set()
        for body in self._request(request, ofp.OFPT_MULTIPART_REPLY):
            offset = 8  # multipart header: type, flags, pad
            while offset + 32 <= len(body):
                (length,) = struct.unpack("!H", body[offset:offset + 2])
                # ofp_flow_stats: length, table, pad, duration (8), priority, idle, hard,
                # flags, pad (4), then the cookie.
                found.add(int(struct.unpack("!Q", body[offset + 24:offset + 32])[0]))
                offset += max(length, 32)
        return found

    def _batch(self, add: Iterable[tuple[int, int, int]], delete: Iterable[int],
               rules: Iterable[Rule], delete_masked: Iterable[tuple[int, int]], *,
               packed: bool = False) -> list:
        """The batch's flow-mods; with ``packed`` the link pairs and cookie deletes as
        Packed (not for bundles: a bundle-add wraps an os-ken message)."""
        def link_flow(cookie: int, a: int, b: int) -> object:
            return Packed(self._link_flow, (cookie, a, b)) if packed else \
                output_flow(cookie, a, b)

        def gone(cookie: int) -> object:
            return Packed(self._cookie_delete, (cookie,)) if packed else delete_cookie(cookie)

        messages = [gone(cookie) for cookie in delete]
        messages += [delete_cookie(cookie, mask) for cookie, mask in delete_masked]
        for cookie, a, b in add:
            messages += [link_flow(cookie, a, b), link_flow(cookie, b, a)]
        messages += [output_flow(*rule) for rule in rules]
        return messages

    def submit(self, done: Callable[[list[str]], None], *,
               add: Iterable[tuple[int, int, int]] = (), delete: Iterable[int] = (),
               rules: Iterable[Rule] = (),
               delete_masked: Iterable[tuple[int, int]] = ()) -> None:
        """Send a batch: delete cookies (and (cookie, mask) pairs), add (cookie, port a,
        port b) link pairs and single ``rules``, then a barrier. ``done(errors)`` is
        called from ``read``/``wait`` once the switch has applied it (``errors``: its
        refusals, empty when all went in); at once when the batch is empty."""
        messages = self._batch(add, delete, rules, delete_masked, packed=True)
        if not messages:
            done([])
            return
        with self._lock:
            barrier = self._send(*messages, self._parser.OFPBarrierRequest(self._dp))
            self._waiting[barrier] = done

    def stage(self, done: Callable[[list[str]], None], *,
              add: Iterable[tuple[int, int, int]] = (), delete: Iterable[int] = (),
              rules: Iterable[Rule] = (),
              delete_masked: Iterable[tuple[int, int]] = ()) -> int | None:
        """First half of an all-or-nothing batch: its flow-mods go into an open bundle
        (OpenFlow 1.3's ONF bundle extension, what `ovs-ofctl --bundle` uses), then a
        barrier; ``done(errors)`` hears what the switch refused. Nothing is applied until
        `finish` commits. Two halves because OVS checks each message as it is added and,
        measured here, a commit applies whatever was added even after one was refused.
        Returns the bundle's id, None for an empty batch (``done`` is then called)."""
        messages = self._batch(add, delete, rules, delete_masked)
        if not messages:
            done([])
            return None
        ofp, parser = self._ofp, self._parser
        flags = ofp.ONF_BF_ATOMIC | ofp.ONF_BF_ORDERED
        with self._lock:
            self._bundle_id += 1
            bundle = self._bundle_id
            barrier = self._send(
                parser.ONFBundleCtrlMsg(self._dp, bundle, ofp.ONF_BCT_OPEN_REQUEST, flags, []),
                *[parser.ONFBundleAddMsg(self._dp, bundle, flags, message, [])
                  for message in messages],
                parser.OFPBarrierRequest(self._dp))
            self._waiting[barrier] = done
        return bundle

    def finish(self, bundle: int, done: Callable[[list[str]], None], *,
               commit: bool) -> None:
        """Second half: commit the staged bundle (applied at once, all or none of it) or
        discard it; ``done(errors)`` once the switch has."""
        ofp = self._ofp
        kind = ofp.ONF_BCT_COMMIT_REQUEST if commit else ofp.ONF_BCT_DISCARD_REQUEST
        flags = ofp.ONF_BF_ATOMIC | ofp.ONF_BF_ORDERED
        with self._lock:
            barrier = self._send(
                self._parser.ONFBundleCtrlMsg(self._dp, bundle, kind, flags, []),
                self._parser.OFPBarrierRequest(self._dp))
            self._waiting[barrier] = done

    def read(self) -> None:
        """Take in the switch's replies without blocking; completes finished batches."""
        with self._lock:
            while self._fill(block=False):
                pass
            self._dispatch()

    def wait(self) -> None:
        """Block until every submitted batch is complete (their callbacks called)."""
        with self._lock:
            self._dispatch()
            while self._waiting:
                self._fill(block=True)
                self._dispatch()

    def change(self, *, add: Iterable[tuple[int, int, int]] = (),
               delete: Iterable[int] = ()) -> None:
        """Add link pairs and delete cookies as one batch and wait until it is applied
        (earlier batches complete first); an error reply for any of it raises."""
        outcome: list[list[str]] = []
        with self._lock:
            self.submit(outcome.append, add=add, delete=delete)
            while not outcome:
                self._fill(block=True)
                self._dispatch()
        if outcome[0]:
            raise EnvironmentProblem(f"bridge {self.bridge} refused flow changes: "
                                     + "; ".join(outcome[0][:5]))


Batch = tuple[list[Rule], list[int], list[tuple[int, int]]]
"""One bridge's part of a batch: rules to add, cookies to delete, (cookie, mask) to delete."""


def apply_all(channels: Mapping[str, Channel], work: Mapping[str, Batch],
              timeout: float) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Apply a batch on several bridges (a lab's hosts) all or nothing, in two rounds
    sent to every bridge before any answer is read (the bridges work in parallel
    without a thread each): each stages its part in a bundle; if every bridge took its
    part, all commit, else all discard, so a refusal on one host leaves every host as it
    was. Returns when each bridge had committed (seconds from the start: their spread is
    how far apart the hosts changed) and, when any refused, what each refused (then
    nothing was applied anywhere); raises if a bridge does not answer within ``timeout``."""
    start = time.monotonic()
    deadline = start + timeout
    refused: dict[str, list[str]] = {}
    bundles: dict[str, int] = {}
    staged: set[str] = set()

    def answered(name: str, into: set[str] | dict[str, float],
                 errors_to: dict[str, list[str]]) -> Callable[[list[str]], None]:
        def record(errors: list[str]) -> None:
            if isinstance(into, dict):
                into[name] = time.monotonic() - start
            else:
                into.add(name)
            if errors:
                errors_to[name] = errors
        return record

    for name, (rules, cookies, masked) in sorted(work.items()):
        bundle = channels[name].stage(answered(name, staged, refused), delete=cookies,
                                      rules=rules, delete_masked=masked)
        if bundle is not None:
            bundles[name] = bundle
    _read_until(channels, lambda: staged >= set(work), deadline, timeout,
                lambda: [n for n in work if n not in staged])
    commit = not refused
    finished: dict[str, float] = {name: 0.0 for name in work if name not in bundles}
    failed: dict[str, list[str]] = {}
    for name, bundle in sorted(bundles.items()):
        channels[name].finish(bundle, answered(name, finished, failed), commit=commit)
    _read_until(channels, lambda: set(finished) >= set(work), deadline, timeout,
                lambda: [n for n in work if n not in finished])
    if not commit:
        return {}, refused
    return finished, failed


def _read_until(channels: Mapping[str, Channel], done: Callable[[], bool], deadline: float,
                timeout: float, pending: Callable[[], list[str]]) -> None:
    while not done():
        waiting = [channels[n] for n in pending()]
        left = deadline - time.monotonic()
        ready = select.select(waiting, [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            raise EnvironmentProblem(
                f"no answer within {timeout:.0f} s from the bridge at "
                f"{', '.join(sorted(channels[n].target for n in pending()))}")
        for channel in ready:
            channel.read()
