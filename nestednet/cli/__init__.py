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
    """


def _register() -> None:
    from nestednet.cli import doctor, graph, images, visibility

    for module in (doctor, images, graph, visibility):
        module.register(main)


_register()
