"""The GNAB's ICMP poll: packets, reply matching, rounds, and a real loopback probe."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from nestednet.agent import probe
from nestednet.agent import protocol as p
from nestednet.agent.gnab import Agent, AgentConfig

pytestmark = pytest.mark.unit


def test_checksum_of_rfc1071_example_and_of_a_packet_that_carries_it():
    # RFC 1071 section 3: the sum of 0001 f203 f4f5 f6f7 is ddf2, its complement 220d.
    assert probe.checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    packet = probe.echo_request(0x1234, 7, b"odd")  # odd length: padded with a zero
    assert probe.checksum(packet) == 0
    kind, code, _sum, ident, seq = struct.unpack("!BBHHH", packet[:8])
    assert (kind, code, ident, seq, packet[8:]) == (8, 0, 0x1234, 7, b"odd")


def _reply(ident: int, seq: int, kind: int = probe.ECHO_REPLY) -> bytes:
    return struct.pack("!BBHHH", kind, 0, 0, ident, seq) + b"x"


def test_replies_are_parsed_with_and_without_the_ip_header():
    ip = bytes([0x45]) + bytes(19)  # IPv4, 20-byte header
    assert probe.parse_echo_reply(_reply(5, 9), ip_header=False) == (5, 9)
    assert probe.parse_echo_reply(ip + _reply(5, 9), ip_header=True) == (5, 9)
    options = bytes([0x46]) + bytes(23)  # 24-byte header (options)
    assert probe.parse_echo_reply(options + _reply(1, 2), ip_header=True) == (1, 2)
    assert probe.parse_echo_reply(_reply(5, 9, kind=probe.ECHO_REQUEST), ip_header=False) is None
    assert probe.parse_echo_reply(b"\x00\x00", ip_header=False) is None
    assert probe.parse_echo_reply(bytes([0x60]) + bytes(40), ip_header=True) is None


def test_a_round_ends_when_all_answered_or_at_its_deadline():
    targets = {"iphy1": "10.0.0.1", "iphy2": "10.0.0.2"}
    full = probe.Round(targets, first_seq=65535, deadline=10.0)  # seq wraps: 65535, 0
    assert full.result(1.0) is None
    full.answered("10.0.0.1", 65535)
    full.answered("10.0.0.2", 5)  # not a seq of this round
    assert full.result(1.0) is None
    full.answered("10.0.0.2", 0)
    assert full.result(1.0) == {"iphy1": True, "iphy2": True}
    late = probe.Round(targets, first_seq=0, deadline=10.0)
    late.answered("10.0.0.2", 1)
    late.answered("10.0.0.9", 0)  # a stranger
    assert late.result(9.99) is None
    assert late.result(10.0) == {"iphy1": False, "iphy2": True}


def _icmp_allowed() -> bool:
    for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):
        try:
            socket.socket(socket.AF_INET, kind, socket.IPPROTO_ICMP).close()
            return True
        except OSError:
            pass
    return False


@pytest.mark.skipif(not _icmp_allowed(), reason="no ping socket and no CAP_NET_RAW here")
def test_agent_polls_its_iphys_without_blocking_or_child_processes():
    agent = Agent(AgentConfig(node="a", ca_host="127.0.0.1", ca_port=1,
                              iphys={"iphy1": "127.0.0.1", "iphy2": "no-such-host.invalid",
                                     "iphy3": "127.0.0.2"}))
    agent.start_poll()
    first = agent._probe.round
    agent.start_poll()  # a poll under way is not started twice
    assert agent._probe.round is first
    deadline = time.monotonic() + 10
    while (changed := agent.finish_poll()) is None:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert changed is True
    assert agent.state.iphys_up == {"iphy1": True, "iphy2": False, "iphy3": True}
    assert agent.finish_poll() is None  # nothing under way
    agent.start_poll()
    while (changed := agent.finish_poll()) is None:
        time.sleep(0.005)
    assert changed is False


@pytest.mark.skipif(not _icmp_allowed(), reason="no ping socket and no CAP_NET_RAW here")
def test_a_silent_address_is_down_after_the_timeout():
    icmp = probe.IcmpProbe({"iphy1": "203.0.113.77"}, timeout=0.2)  # TEST-NET-3: no answer
    try:
        icmp.start()
        started = time.monotonic()
        while (up := icmp.finish()) is None:
            icmp.read()
            time.sleep(0.01)
        assert up == {"iphy1": False}
        assert time.monotonic() - started >= 0.19
    finally:
        icmp.close()


class _Rounds:
    """Stands in for the ICMP probe: each finish() hands out the next round's answers."""

    def __init__(self, rounds: list[dict[str, bool]]) -> None:
        self.rounds = iter(rounds)

    def read(self) -> None:
        pass

    def finish(self) -> dict[str, bool]:
        return next(self.rounds)


def test_an_up_iphy_is_down_only_after_missing_three_polls_in_a_row():
    agent = Agent(AgentConfig(node="a", ca_host="127.0.0.1", ca_port=1,
                              iphys={"iphy1": "x", "iphy2": "y"}, poll_interval=2))
    yes, no = True, False
    agent._probe = _Rounds([{"iphy1": yes, "iphy2": no},  # iphy2 never answered: down
                            {"iphy1": no, "iphy2": no}, {"iphy1": no, "iphy2": no},
                            {"iphy1": yes, "iphy2": no},  # two misses, then an answer
                            {"iphy1": no, "iphy2": no}, {"iphy1": no, "iphy2": no},
                            {"iphy1": no, "iphy2": no},  # three in a row: down
                            {"iphy1": yes, "iphy2": yes}])  # one answer: up again
    seen = []
    for _ in range(8):
        changed = agent.finish_poll()
        seen.append((changed, dict(agent.state.iphys_up)))
    assert [c for c, _ in seen] == [True, False, False, False, False, False, True, True]
    assert [s["iphy1"] for _, s in seen] == [True, True, True, True, True, True, False, True]
    assert [s["iphy2"] for _, s in seen] == [False] * 7 + [True]


def test_the_poll_does_not_bring_back_an_iphy_the_cas_id_left_out():
    agent = Agent(AgentConfig(node="a", ca_host="127.0.0.1", ca_port=1,
                              iphys={"iphy1": "x", "iphy2": "y"}, poll_interval=2))
    agent.handle({"type": p.ID, "node": "a", "node_id": 1, "control_ip": "10.0.0.2",
                  "links": [], "iphys": ["iphy1"]})
    agent._probe = _Rounds([{"iphy1": True, "iphy2": True}])
    assert agent.finish_poll() is True
    assert agent.state.iphys_up == {"iphy1": True}
