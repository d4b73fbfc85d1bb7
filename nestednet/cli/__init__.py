"""The `nestednet` command line: parses, calls the library, prints. Nothing else.

Labs, links and runs are reached through the Python API (nestednet.api), as a script
reaches them; tests/unit/test_import_graph.py keeps Docker, OVS, netlink and the lab
and CA runtimes out of this package.

One module per command family, each adding its commands to `main` in `register`:

- `doctor`: what this machine can do (nestednet.capabilities).
- `images`: build the base, component and node-parent images.
- `nodes`: create, status, exec, swap, delete, cleanup.
- `links`: link add/del/list, flows on the main bridge.
- `run`, `demo`: play a scenario with the communication assistant.
- `visibility`, `graph`: generate and check scenarios, draw them.
- `capture`: pcapng from iPHY ports (nestednet.lab.capture).
- `report`: a run's results page (nestednet.report).
- `bench`: the paper's measurements, nested vs flat.
- `hosts`: planning labs over several hosts (placement, tunnels).

Output conventions shared with linkemu live in nestednet.console.
"""

from __future__ import annotations

import click

from nestednet import __version__
from nestednet.cli import (
    bench,
    capture,
    demo,
    doctor,
    graph,
    hosts,
    images,
    links,
    nodes,
    report,
    run,
    visibility,
)
from nestednet.console import ErrorHandlingGroup


@click.group(cls=ErrorHandlingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nestednet")
def main() -> None:
    """NestedNet: emulate fleets whose every node is itself a small network.

    Each node is a Docker-in-Docker parent; inside it a GNAB and N iPHY children
    are wired to an internal Open vSwitch, and every iPHY has a port on the host's
    main bridge, where flows decide which node-to-node links exist.

    \b
    First steps:
      nestednet doctor                  what this machine can do
      nestednet images build            build the images (no registry needed)
      nestednet create -n 2 -m 2        a lab of 2 nodes x (GNAB + 2 iPHYs)
      nestednet link add n1:iphy1 n2:iphy1
      nestednet status                  nodes, components, addresses, links
      nestednet delete                  remove the lab
    """


for _module in (doctor, images, nodes, links, run, demo, visibility, graph, bench, hosts,
                report, capture):
    _module.register(main)
