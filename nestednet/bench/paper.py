"""The published figures we compare against (pure data, one place).

Source: /work/shared/seeds/paper-nestednet.txt (Zhang, Prabhu, Tessier, "NestedNet"),
read from its Tables I-IV, Fig. 3's caption and the text of §V. Every number below is a
``{"value": v, "source": "..."}`` pair naming the table (row, column) or passage it was
read from; reports print the source beside the number. Fig. 4's points are only drawn,
not printed, so for scaling we hold what §V.D states in words (the spread of per-link
throughput) and nothing more. The paper has no link-fidelity experiment; its companion
thesis (/work/shared/seeds/thesis-nestednet-linkemu.txt, §4.7) measured its link emulator
on a hardware testbed, and THESIS holds those figures the same way.
"""

from __future__ import annotations

from typing import Any

SOURCE = "paper-nestednet.txt"
SETUP = ("Ubuntu 16.04 VM (kernel 4.4.0, OVS 2.11.1, Docker 18.09.3) with 4 CPU cores on a "
         "14-core Xeon server (§IV.B, §V.B); nested = NestedNet, flat = Containernet")


def cite(value: float | None, source: str) -> dict[str, Any]:
    """One published number and where in the paper it is printed."""
    return {"value": value, "source": f"{SOURCE}, {source}"}


def _table_i() -> dict[str, dict[str, dict[str, Any]]]:
    """Table I (memory, MB), row by row; '-' in the paper is None."""
    rows = {  # key: (row label as printed, NestedNet, ContainerNet)
        "node_container_mb": ("Node container", 0.6, 4.0),
        "component_container_mb": ("Component container", 0.5, None),
        "internal_docker_daemon_mb": ("Internal Docker daemon", 47.0, None),
        "internal_ovs_mb": ("Internal Open vSwitch", 50.3, 50.3),
        "main_ovs_mb": ("Main Open vSwitch Bridge", 50.3, 50.3),
        "containernet_daemon_mb": ("ContainerNet daemon", None, 4.0),
        "external_docker_daemon_mb": ("External Docker daemon", 76.6, 76.6),
        "single_node_mb": ("Single node", 98.4, 55.0),
        "four_nodes_mb": ("Four nodes", 520.5, 350.9),
    }
    return {key: {"nested": cite(n, f"Table I, row '{label}', NestedNet"),
                  "flat": cite(f, f"Table I, row '{label}', ContainerNet")}
            for key, (label, n, f) in rows.items()}


def _tables_ii_iii() -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """Tables II (intra-node) and III (inter-node): averages for 1, 2 and 4 connections.

    Keyed by scope, then the connection count as a string (results are stored as JSON).
    """
    printed = {  # scope: table, {connections: (Containernet Gbps, NestedNet Gbps,
        #                                        Containernet ms, NestedNet ms)}
        "intra": ("Table II", {1: (30.36, 31.76, 0.056, 0.075), 2: (27.46, 26.29, 0.053, 0.072),
                               4: (17.57, 19.58, 0.052, 0.072)}),
        "inter": ("Table III", {1: (26.92, 32.05, 0.082, 0.080), 2: (24.11, 25.42, 0.075, 0.074),
                                4: (14.19, 15.74, 0.074, 0.073)}),
    }
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for scope, (table, by_conns) in printed.items():
        out[scope] = {}
        for conns, (flat_g, nested_g, flat_ms, nested_ms) in by_conns.items():
            s = "s" if conns > 1 else ""
            thr = f"{table}, 'Avg. Throughput for {conns} connection{s}'"
            lat = f"{table}, 'Avg. Latency for {conns} connection{s}'"
            out[scope][str(conns)] = {
                "nested_gbps": cite(nested_g, f"{thr}, NestedNet"),
                "flat_gbps": cite(flat_g, f"{thr}, Containernet"),
                "nested_ms": cite(nested_ms, f"{lat}, NestedNet"),
                "flat_ms": cite(flat_ms, f"{lat}, Containernet")}
    return out


PAPER: dict[str, Any] = {
    "setup": SETUP,
    "memory": {"source": f"{SOURCE}, Table I", "rows": _table_i(),
               "note": "a four-node system; Docker stats and htop (§V.A)"},
    "links": {"source": f"{SOURCE}, Tables II and III", "cells": _tables_ii_iii(),
              "note": "12 nodes x 4 iPHYs, averages over 100 tests of 60 s; latency by ping "
                      "(§V.B)"},
    "stress": {
        "source": f"{SOURCE}, Fig. 3 and §V.C",
        "D_nested": cite(0.72, "Fig. 3 caption and §V.C text (NestedNet, D = 72 %)"),
        "D_flat": cite(0.98, "Fig. 3 caption and §V.C text (Containernet, D = 98 %)"),
        "T1_nested_gbps": cite(30.0, "§V.C text: 'from 30Gbps to 8Gbps' (NestedNet)"),
        "T2_nested_gbps": cite(8.0, "§V.C text: 'from 30Gbps to 8Gbps' (NestedNet)"),
        "T1_flat_gbps": cite(30.0, "§V.C text: '30Gbps to 500Mbps' (Containernet)"),
        "T2_flat_gbps": cite(0.5, "§V.C text: '30Gbps to 500Mbps' (Containernet)"),
    },
    "scaling": {
        "source": f"{SOURCE}, Fig. 4 and §V.D",
        "nested_stdev_pct_5": cite(4.0, "§V.D text: NestedNet deviation '4% for five iPHYs'"),
        "nested_stdev_pct_25": cite(7.0, "§V.D text: NestedNet deviation '7% for 25 iPHYs'"),
        "flat_stdev_pct_min": cite(6.0, "§V.D text: Containernet 'from 6% to 13%'"),
        "flat_stdev_pct_max": cite(13.0, "§V.D text: Containernet 'from 6% to 13%'"),
        "note": "Fig. 4's throughput points are drawn, not printed; the text gives only the "
                "spread (stdev as % of the average) per node",
    },
    "startup": {
        "source": f"{SOURCE}, Table IV",
        "rows": [
            {"nodes": 12, "iphys": 4,
             "nested_s": cite(98.0, "Table IV, row 12 nodes x 4 iPHYs, NestedNet"),
             "flat_s": cite(28.0, "Table IV, row 12 nodes x 4 iPHYs, Containernet")},
            {"nodes": 2, "iphys": 25,
             "nested_s": cite(93.0, "Table IV, row 2 nodes x 25 iPHYs, NestedNet"),
             "flat_s": cite(9.0, "Table IV, row 2 nodes x 25 iPHYs, Containernet")},
        ],
    },
}


THESIS_SOURCE = "thesis-nestednet-linkemu.txt"


def cite_thesis(value: float | None, source: str) -> dict[str, Any]:
    """One number printed in the thesis and where."""
    return {"value": value, "source": f"{THESIS_SOURCE}, {source}"}


THESIS: dict[str, Any] = {
    "fidelity": {
        "source": f"{THESIS_SOURCE}, §4.7",
        "accuracy_pct_min": cite_thesis(95.3, "§4.7.1 text and Fig. 4.10: observed / "
                                              "configured bandwidth 'minimum ... 95.3'"),
        "accuracy_pct_max": cite_thesis(95.8, "§4.7.1 text and Fig. 4.10: observed / "
                                              "configured bandwidth '... maximum of 95.8'"),
        "inherent_delay_ms": cite_thesis(1.67, "§4.7.2, Table 4.2, row expected 0 ms, "
                                               "observed Avg (ms)"),
        "note": "the link emulator (HTB/HFSC + netem) between Raspberry Pis, 1-20 Mbit/s and "
                "0-15 ms; its RTT includes a testbed's inherent delay, ours is measured as a "
                "rise over the idle RTT, which leaves that out",
    },
}


def value(cited: dict[str, Any] | None) -> float | None:
    """The number of a cited value (None when the paper prints none)."""
    return None if cited is None else cited["value"]


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0 (a verdict without data says so)."""
    return a / b if a is not None and b else None
