"""The host switch's ports a create holds back until every node is built."""

from __future__ import annotations

import threading

import pytest

from nestednet.lab.wiring import HostPorts, PortBatch

pytestmark = pytest.mark.unit


class Switch:
    """Records the transactions it is asked for."""

    def __init__(self) -> None:
        self.transactions: list[tuple[str, list]] = []

    def add_ports(self, bridge: str, ports: list) -> None:
        self.transactions.append((bridge, list(ports)))


def test_ports_from_many_builders_go_in_one_transaction_a_bridge():
    held = HostPorts()

    def builder(node: int) -> None:
        node_batch = PortBatch()
        for iphy in range(4):
            node_batch.add_port("lab-main", f"p{node}x{iphy}", ofport=node * 10 + iphy)
        node_batch.add_to(held)
        held.add_port(f"lab-n{node}", f"q{node}")

    threads = [threading.Thread(target=builder, args=(n,)) for n in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    switch = Switch()
    held.add_to(switch)
    bridges = [bridge for bridge, _ in switch.transactions]
    assert sorted(bridges) == sorted(["lab-main"] + [f"lab-n{n}" for n in range(50)])
    main = dict(switch.transactions)["lab-main"]
    assert sorted(name for name, _ in main) == sorted(f"p{n}x{i}" for n in range(50)
                                                      for i in range(4))
    assert all(kwargs["ofport"] == int(name[1:name.index("x")]) * 10 + int(name[-1])
               for name, kwargs in main)
    assert len(held.names()) == 250
