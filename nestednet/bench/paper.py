"""The NestedNet paper's published figures we compare against (pure data).

Only values we hold a source for are filled in; the rest are None and reports say
"not transcribed" rather than inventing them. Sources: "NestedNet: A
Container-based Prototyping Tool for Hierarchical Software Defined Networks" (IEEE
conference, Hamburg, September 2020; 8-core VM, 12 nodes x (GNAB + 4 iPHYs)) as
quoted in our issues 3 and 6, and the paper's abstract.
"""

from __future__ import annotations

PAPER = {
    "setup": "8-core VM; 12 nodes x (1 GNAB + 4 iPHYs); Docker-in-Docker nodes vs Containernet",
    "memory": {
        "per_node_mb_nested": 128,
        "table": "Table I",
        "note": "~128 MB per nested node; the per-part rows of Table I are not transcribed",
    },
    "links": {
        "table": "Tables II/III",
        "max_link_gbps": 32,
        "note": "abstract: 'emulated throughput values of up to 32 Gbps per link'; the "
                "per-connection-count rows of Tables II/III are not transcribed",
    },
    "stress": {"figure": "Fig. 3", "D_nested": 0.72, "D_flat": 0.98},
    "scaling": {"figure": "Fig. 4", "note": "values not transcribed"},
    "startup": {
        "table": "Table IV",
        "nodes": 12, "iphys": 4,
        "nested_s": 98.0, "flat_s": 28.0,
        "note": "12 x (1+4) on an 8-core VM: NestedNet 98 s, Containernet 28 s",
    },
}


def value(experiment: str, key: str):
    """A paper value or None (not transcribed)."""
    return PAPER.get(experiment, {}).get(key)


def fmt(v, unit: str = "", digits: int = 2) -> str:
    """How reports print a paper value: the number, or that we do not have it."""
    if v is None:
        return "n/t"
    if isinstance(v, float):
        return f"{v:.{digits}f}{unit}"
    return f"{v}{unit}"
