"""The GNAB agent: the node's side of link negotiation with the communication assistant.

It knows its iPHYs, tells the CA who it is, keeps the CA's latest view of which
peers it can see, and asks for links from free iPHYs toward visible peers it is not
yet linked with, trying other peers after a LINK_FAIL. The CA decides; the agent
only asks, records and reports. It survives a CA restart by reconnecting and saying
HELLO again with the links it believes in, and the CA reconciles.

Single-threaded (one selector loop), standard library only.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import sys
import time

from nestednet.agent import protocol as p
from nestednet.agent.probe import IcmpProbe

# Every GNAB runs this module, so what it imports is paid once per node: logging,
# subprocess, pathlib and dataclasses (with inspect and ast behind it) cost ~3 MB of
# heap in each agent and are left out; nestednet.agent.routes comes in only when
# --routing direct needs it.


class _Log:
    """The agent's few log lines on stderr, in the format `logging` gave them."""

    def info(self, message: str, *args: object) -> None:
        self._write("INFO", message % args if args else message)

    def warning(self, message: str, *args: object) -> None:
        self._write("WARNING", message % args if args else message)

    @staticmethod
    def _write(level: str, text: str) -> None:
        now = time.time()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        sys.stderr.write(f"{stamp},{int(now % 1 * 1000):03d} agent {level} {text}\n")
        sys.stderr.flush()


log = _Log()

DOWN_AFTER_MISSES = 3
"""Polls in a row an up iPHY must miss before it counts as down (6 s at the 2 s poll). One
late reply is not a dead iPHY: in an idle 120 x 4 lab here 1 of 160 single pings (4 nodes,
10 polls) went unanswered within the poll's 1 s, more during a run; taken as down at once,
the iPHY left its agent's inventory for a poll and the agent sent a HELLO each time."""

# LINK_FAIL reasons after which this peer is not asked again until visibility changes.
_PEER_REFUSED = {"link_exists", "no_free_iphy", "mutual_already_won", "not_visible",
                 "unknown_node", "same_node"}


def _iphy_order(name: str) -> tuple[int, str]:
    """``iphy10`` after ``iphy9``: by number, then by name for anything else."""
    digits = name.removeprefix("iphy")
    return (int(digits) if digits.isdigit() else -1, name)


class AgentConfig:
    """How the agent is set up (from the environment in a GNAB: from_env)."""

    def __init__(self, node: str, ca_host: str, ca_port: int, iphys: dict[str, str],
                 poll_interval: float = 2.0, state_file: str | os.PathLike | None = None,
                 routing: str = "none", node_address: str = "",
                 gnab_intra: str = "192.168.0.1") -> None:
        self.node, self.ca_host, self.ca_port = node, ca_host, ca_port
        self.iphys = iphys
        """iPHY name -> its intra-node address (what the agent polls)."""
        self.poll_interval = poll_interval
        """Seconds between iPHY polls; 0 trusts the inventory without polling."""
        self.state_file = state_file
        self.routing = routing
        """`direct`: keep a route per link in the node's components
        (nestednet.agent.routes)."""
        self.node_address, self.gnab_intra = node_address, gnab_intra

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AgentConfig:
        env = dict(os.environ if env is None else env)
        host, _, port = env["NESTEDNET_CA"].rpartition(":")
        iphys = dict(item.split("=", 1) for item in env["NESTEDNET_IPHYS"].split(",") if item)
        state = env.get("NESTEDNET_AGENT_STATE", "/run/nestednet/agent.json")
        return cls(node=env["NESTEDNET_NODE"], ca_host=host, ca_port=int(port), iphys=iphys,
                   poll_interval=float(env.get("NESTEDNET_POLL_S", "2")),
                   state_file=state or None,
                   routing=env.get("NESTEDNET_ROUTING", "none"),
                   node_address=env.get("NESTEDNET_NODE_ADDRESS", ""),
                   gnab_intra=env.get("NESTEDNET_GNAB_INTRA", "192.168.0.1"))


class AgentState:
    """What the agent believes; written to the state file for `nestednet status`."""

    def __init__(self, node: str, iphys_up: dict[str, bool] | None = None) -> None:
        self.node = node
        self.node_id: int | None = None
        self.control_ip: str | None = None
        self.iphys_up: dict[str, bool] = {} if iphys_up is None else iphys_up
        self.links: dict[str, tuple[str, str]] = {}
        """peer node -> (local iPHY, peer iPHY)."""
        self.visible: list[str] = []
        self.step = -1
        self.refused: set[str] = set()
        """Peers not to ask this step: they refused us, or the CA said they are full."""
        self.iphys_refused: set[str] = set()
        """Own iPHYs the CA refused this step (busy or unknown to it): not offered again."""
        self.pending: dict[int, tuple[str, str]] = {}
        """req_id -> (peer, local iPHY) for requests not yet answered."""
        self.connected = False

    def free_iphys(self) -> list[str]:
        """Free iPHYs, highest-numbered first: the CA gives incoming links the lowest free
        one, so asking from the top keeps our requests off the iPHY an incoming link
        is about to take (which the CA would refuse as src_iphy_busy)."""
        used = {local for local, _ in self.links.values()} | self.iphys_refused
        used |= {iphy for _, iphy in self.pending.values()}
        return sorted((name for name, up in self.iphys_up.items() if up and name not in used),
                      key=_iphy_order, reverse=True)

    def wanted_requests(self) -> list[tuple[str, str]]:
        """(peer, local iPHY) pairs to ask for now: free iPHYs toward untried visible peers."""
        asked = {peer for peer, _ in self.pending.values()}
        peers = [peer for peer in self.visible
                 if peer != self.node and peer not in self.links and peer not in asked
                 and peer not in self.refused]
        if not peers:
            return []
        free = self.free_iphys()
        # As link_table.spare_limit: keep one free iPHY for an incoming link while asking.
        limit = max(len(free) - 1, 0 if self.pending else min(len(free), 1))
        return list(zip(peers, free[:limit], strict=False))

    def react(self, message: dict) -> list[tuple[str, str]]:
        """Apply one CA message; return the (peer, local iPHY) requests to send now.

        The caller records each in ``pending`` under its req_id before the next message.
        Pure and deterministic, so the CA can run a copy on every message it sends and
        know which requests are on their way (nestednet.ca.mirror).
        """
        kind = message["type"]
        if kind == p.ID:
            # The CA names us as the scenario does; our lab name only identified us in HELLO.
            self.node = message["node"]
            self.node_id, self.control_ip = message["node_id"], message["control_ip"]
            if "iphys" in message:  # the scenario may give this node fewer iPHYs than it has
                self.iphys_up = {name: up for name, up in self.iphys_up.items()
                                 if name in message["iphys"]}
            self.links = {link["peer"]: (link["local_iphy"], link["peer_iphy"])
                          for link in message["links"]}
            self.pending.clear()
            # A new session: what an earlier CA (or run) showed is void. A CA in the
            # middle of a step sends that step right after; until then nothing to ask.
            self.step, self.visible = -1, []
            self.refused.clear()
            self.iphys_refused.clear()
        elif kind == p.STEP:
            # The CA's whole view for this step: visibility and links replace ours at once.
            self.step, self.visible = message["step"], sorted(message["peers"])
            self.links = {link["peer"]: (link["local_iphy"], link["peer_iphy"])
                          for link in message["links"]}
            self.refused = set(message.get("full", []))
            self.iphys_refused.clear()
        elif kind == p.FULL:
            self.refused.update(message["peers"])
        elif kind == p.LINK_OK:
            self.pending.pop(message["req_id"], None)
            self.links[message["dst_node"]] = (message["src_iphy"], message["dst_iphy"])
        elif kind == p.LINK_FAIL:
            self.pending.pop(message["req_id"], None)
            if message["reason"] in _PEER_REFUSED:
                self.refused.add(message["dst_node"])
            elif message.get("src_iphy"):
                # src_iphy_busy / src_iphy_unknown: asking again at once would only repeat.
                self.iphys_refused.add(message["src_iphy"])
        elif kind == p.LINK_UP:
            self.links[message["peer"]] = (message["local_iphy"], message["peer_iphy"])
        elif kind == p.ERROR:
            log.warning("CA reported an error: %s", message["error"])
        return self.wanted_requests()

    def as_dict(self) -> dict:
        return {
            "node": self.node, "node_id": self.node_id, "control_ip": self.control_ip,
            "connected": self.connected, "step": self.step, "visible": self.visible,
            "iphys": self.iphys_up,
            "links": [{"peer": peer, "local_iphy": local, "peer_iphy": remote}
                      for peer, (local, remote) in sorted(self.links.items())],
            "pending": [{"req_id": r, "peer": peer, "local_iphy": iphy}
                        for r, (peer, iphy) in sorted(self.pending.items())],
        }


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.state = AgentState(node=config.node,
                                iphys_up=dict.fromkeys(config.iphys, config.poll_interval <= 0))
        self._misses: dict[str, int] = {}
        """iPHY -> polls missed in a row."""
        self._sock: socket.socket | None = None
        self._reader = p.LineReader()
        self._next_req = 1
        self._selector = selectors.DefaultSelector()
        self._stop = False
        self._probe: IcmpProbe | None = None
        self.routes = None
        if config.routing == "direct" and config.node_address:
            # Lazy: only --routing direct needs it (and the stdlib modules it pulls in).
            from nestednet.agent.routes import RouteSync

            self.routes = RouteSync(config.iphys, config.node_address, config.gnab_intra)

    # --- decisions -----------------------------------------------------------------

    def handle(self, message: dict) -> list[bytes]:
        """Apply one CA message to the state; return the messages to send back."""
        if self.routes is not None and message.get("type") == p.ID and "directory" in message:
            self.routes.learn(message["directory"])
        out = []
        for peer, iphy in self.state.react(message):
            req_id = self._next_req
            self._next_req += 1
            self.state.pending[req_id] = (peer, iphy)
            out.append(p.encode(p.LINK_REQ, req_id=req_id, src_node=self.state.node,
                                dst_node=peer, src_iphy=iphy, step=self.state.step,
                                sent=round(time.time(), 6)))
        return out

    def hello(self) -> bytes:
        iphys = [{"name": name, "inter_ip": addr, "up": self.state.iphys_up.get(name, False)}
                 for name, addr in sorted(self.config.iphys.items())]
        links = self.state.as_dict()["links"]
        return p.encode(p.HELLO, node=self.config.node, iphys=iphys, links=links)

    # --- iPHY polling --------------------------------------------------------------

    def start_poll(self) -> None:
        """Ping every iPHY over the intra-node net, all at once and without waiting: the
        agent keeps answering the CA meanwhile (nestednet.agent.probe: one ICMP
        socket, read from the agent's own selector)."""
        if self._probe is None:
            try:
                self._probe = IcmpProbe(self.config.iphys)
            except OSError as exc:  # neither a ping socket nor CAP_NET_RAW
                log.warning("no ICMP socket (%s): iPHYs are taken as up, not polled", exc)
                self.config.poll_interval = 0
                self.state.iphys_up = dict.fromkeys(self.config.iphys, True)
                return
            self._selector.register(self._probe, selectors.EVENT_READ, "probe")
        self._probe.start()

    def finish_poll(self) -> bool | None:
        """None while a poll is under way (or none was started); else True when the
        inventory changed. Takes in the replies waiting first."""
        if self._probe is None:
            return None
        self._probe.read()
        up = self._probe.finish()
        if up is None:
            return None
        changed = False
        for name, answered in up.items():
            if name not in self.state.iphys_up:
                continue  # the CA's ID left it out: this run does not use it
            misses = 0 if answered else self._misses.get(name, 0) + 1
            self._misses[name] = misses
            now_up = answered or (self.state.iphys_up[name] and misses < DOWN_AFTER_MISSES)
            changed |= self.state.iphys_up[name] != now_up
            self.state.iphys_up[name] = now_up
        return changed

    def _poll_wait(self) -> float | None:
        """Seconds until the poll under way times out; None when none is."""
        return self._probe.seconds_left() if self._probe is not None else None

    # --- I/O -----------------------------------------------------------------------

    def _connect(self) -> None:
        sock = socket.create_connection((self.config.ca_host, self.config.ca_port), timeout=3)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        self._sock = sock
        self._reader = p.LineReader()
        self._selector.register(sock, selectors.EVENT_READ, "ca")
        self.state.connected = True
        self.state.pending.clear()
        self._send([self.hello()])
        log.info("connected to CA %s:%s", self.config.ca_host, self.config.ca_port)

    def _disconnect(self) -> None:
        if self._sock is not None:
            self._selector.unregister(self._sock)
            self._sock.close()
        self._sock = None
        self.state.connected = False

    def _send(self, messages: list[bytes]) -> None:
        if self._sock is None or not messages:
            return
        data = b"".join(messages)
        self._sock.setblocking(True)
        try:
            self._sock.sendall(data)
        finally:
            self._sock.setblocking(False)

    def _write_state(self) -> None:
        if self.config.state_file is None:
            return
        path = os.fspath(self.config.state_file)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = os.path.splitext(path)[0] + ".tmp"
        with open(tmp, "w") as out:
            out.write(json.dumps(self.state.as_dict(), indent=1))
        os.replace(tmp, path)

    def _sync_routes(self, *, resend: bool = False) -> None:
        """--routing direct: the thesis's "adds this link to its routing table and
        forwards it to its components", after every batch of CA messages."""
        if self.routes is not None:
            self.routes.sync(self.state.links, self.state.node, resend=resend)

    def stop(self) -> None:
        self._stop = True

    def run(self) -> None:
        """Serve until stop(): connect, read, answer, poll; reconnect with back-off."""
        backoff = 0.2
        next_poll = 0.0
        dirty = True
        if self.config.poll_interval > 0:  # the first HELLO reports iPHYs as they are
            self.start_poll()
            while self._probe is not None and self.finish_poll() is None:
                self._selector.select(timeout=self._poll_wait())
            next_poll = time.monotonic() + self.config.poll_interval
        while not self._stop:
            now = time.monotonic()
            if self.config.poll_interval > 0 and now >= next_poll:
                self.start_poll()
                next_poll = now + self.config.poll_interval
                self._sync_routes(resend=True)
            if self.finish_poll() and self._sock is not None:
                self._send([self.hello()])
                dirty = True
            if self._sock is None:
                try:
                    self._connect()
                    backoff = 0.2
                    dirty = True
                except OSError as exc:
                    log.info("CA not reachable (%s); retrying in %.1f s", exc, backoff)
                    self._write_state()
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
            # The state file is written once nothing is waiting to be read: a message
            # that arrives meanwhile is not held up by a file write.
            polling = self._poll_wait()
            ready = self._selector.select(timeout=0.0 if dirty else
                                          min(0.5, polling) if polling is not None else 0.5)
            if not ready and dirty:
                self._write_state()
                dirty = False
            for key, _ in ready:
                if key.data == "probe":
                    continue  # finish_poll takes the replies in
                dirty = True
                try:
                    data = self._sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    log.info("CA closed the connection")
                    self._disconnect()
                    break
                try:
                    lines = self._reader.feed(data)
                    out = []
                    for line in lines:
                        try:
                            out += self.handle(p.decode(line))
                        except p.ProtocolError as exc:
                            log.warning("ignoring bad message from CA: %s", exc)
                    self._send(out)
                    self._sync_routes()
                except (p.ProtocolError, OSError) as exc:
                    log.warning("dropping connection: %s", exc)
                    self._disconnect()
                    break
        self._write_state()
        self._disconnect()
        if self._probe is not None:
            self._selector.unregister(self._probe)
            self._probe.close()
            self._probe = None
