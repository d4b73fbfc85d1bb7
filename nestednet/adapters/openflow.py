"""OpenFlow rules on a host OVS bridge, in batches, through `ovs-ofctl`.

Neither python-ovs nor ovsdbapp speaks OpenFlow (they speak OVSDB), so flows go
through `ovs-ofctl --bundle add-flows BRIDGE -`: one process per batch, any number
of adds and deletes applied atomically (about 9 ms per call here), which is what
the CA needs for a whole step at once. Every flow carries a cookie naming what it
belongs to, so removal deletes exactly those flows and nothing else.
"""

from __future__ import annotations

import re
import shutil
import socket
import struct
import subprocess
import threading
import types
from dataclasses import dataclass

from nestednet.errors import EnvironmentProblem

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


def cookies(bridge: str) -> set[int]:
    """The cookies of every flow on ``bridge`` (``bridge`` may be an ovs-ofctl target)."""
    done = subprocess.run([_ofctl(), "-O", PROTOCOL, "--no-names", "dump-flows", bridge],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvironmentProblem(f"ovs-ofctl dump-flows {bridge} failed: "
                                 f"{done.stderr.strip()[:300]}")
    return {int(m.group(1), 16) for m in re.finditer(r"cookie=(0x[0-9a-f]+)", done.stdout)}


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
    done = subprocess.run([_ofctl(), "-O", PROTOCOL, "--no-names", "dump-flows", bridge],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvironmentProblem(f"ovs-ofctl dump-flows {bridge} failed: "
                                 f"{done.stderr.strip()[:300]}")
    flows = []
    for line in done.stdout.splitlines():
        match = _FLOW_RE.search(line)
        if match:
            cookie, priority, in_port, output = match.groups()
            flows.append(Flow(int(cookie, 16), int(in_port), int(output), int(priority)))
    return flows


class Channel:
    """A persistent OpenFlow 1.3 session with one bridge, for callers that change flows often.

    The CA installs a batch of links per negotiation round; one `ovs-ofctl` process per
    batch costs ~9 ms, which dominated a 100-node step. This talks OpenFlow directly
    over the bridge's own management socket (<rundir>/<bridge>.mgmt) with os-ken's
    message classes: a batch is its flow-mods plus a barrier, answered in well under a
    millisecond. An error reply for any message of the batch raises.
    """

    def __init__(self, bridge: str, rundir: str = "/var/run/openvswitch",
                 timeout: float = 10.0) -> None:
        # Lazy: only os-ken's message classes, which need no eventlet (os_ken_compat's
        # shim imports eventlet, and a thread that imports eventlet cannot be joined).
        from os_ken.ofproto import ofproto_v1_3, ofproto_v1_3_parser

        self._ofp, self._parser = ofproto_v1_3, ofproto_v1_3_parser
        self._dp = types.SimpleNamespace(ofproto=ofproto_v1_3, ofproto_parser=ofproto_v1_3_parser)
        self._lock = threading.Lock()
        self._xid = 0
        self.bridge = bridge
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(f"{rundir}/{bridge}.mgmt")
            self._send(self._parser.OFPHello(self._dp))
            kind, _, _ = self._receive()
        except OSError as exc:
            self._sock.close()
            raise EnvironmentProblem(f"no OpenFlow session with bridge {bridge}: {exc}") from exc
        if kind != self._ofp.OFPT_HELLO:
            self._sock.close()
            raise EnvironmentProblem(f"bridge {bridge} did not answer the OpenFlow HELLO")

    def close(self) -> None:
        self._sock.close()

    def _send(self, message: object) -> int:
        self._xid += 1
        message.set_xid(self._xid)
        message.serialize()
        self._sock.sendall(message.buf)
        return self._xid

    def _receive(self) -> tuple[int, int, bytes]:
        header = self._exactly(8)
        _version, kind, length, xid = struct.unpack("!BBHI", header)
        return kind, xid, self._exactly(length - 8)

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self._sock.recv(size - len(data))
            if not chunk:
                raise EnvironmentProblem(f"bridge {self.bridge} closed the OpenFlow session")
            data += chunk
        return data

    def _output_flow(self, cookie: int, in_port: int, out_port: int) -> object:
        p, ofp = self._parser, self._ofp
        return p.OFPFlowMod(self._dp, cookie=cookie, priority=LINK_PRIORITY,
                            command=ofp.OFPFC_ADD, match=p.OFPMatch(in_port=in_port),
                            instructions=[p.OFPInstructionActions(
                                ofp.OFPIT_APPLY_ACTIONS, [p.OFPActionOutput(out_port)])])

    def _delete_cookie(self, cookie: int) -> object:
        ofp = self._ofp
        return self._parser.OFPFlowMod(self._dp, cookie=cookie, cookie_mask=(1 << 64) - 1,
                                       table_id=ofp.OFPTT_ALL, command=ofp.OFPFC_DELETE,
                                       out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)

    def change(self, *, add: list[tuple[int, int, int]] = (),
               delete: list[int] = ()) -> None:
        """Add (cookie, port a, port b) link pairs and delete cookies, as one batch."""
        messages = [self._delete_cookie(cookie) for cookie in delete]
        for cookie, a, b in add:
            messages += [self._output_flow(cookie, a, b), self._output_flow(cookie, b, a)]
        if not messages:
            return
        with self._lock:
            for message in messages:
                self._send(message)
            barrier = self._send(self._parser.OFPBarrierRequest(self._dp))
            errors = []
            while True:
                kind, xid, body = self._receive()
                if kind == self._ofp.OFPT_ERROR:
                    err_type, err_code = struct.unpack("!HH", body[:4])
                    errors.append(f"xid {xid}: type {err_type} code {err_code}")
                elif kind == self._ofp.OFPT_BARRIER_REPLY and xid == barrier:
                    break
        if errors:
            raise EnvironmentProblem(f"bridge {self.bridge} refused flow changes: "
                                     + "; ".join(errors[:5]))
