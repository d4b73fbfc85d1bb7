"""The `nestednet` command line: parses, calls the library, prints. Nothing else."""

from __future__ import annotations

import click

from nestednet import __version__
from nestednet.cli.output import ErrorHandlingGroup


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


def _register() -> None:
    from nestednet.cli import bench, demo, doctor, graph, images, links, nodes, run, visibility

    for module in (doctor, images, nodes, links, run, demo, visibility, graph, bench):
        module.register(main)


_register()
