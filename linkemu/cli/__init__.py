"""The `linkemu` command line: parses, calls the library, prints."""

from __future__ import annotations

import click

from nestednet.cli.output import ErrorHandlingGroup


@click.group(cls=ErrorHandlingGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """linkemu: give every client<->server direction its own rate, delay, jitter and loss.

    An Open vSwitch bridge becomes a router through the os-ken (Ryu) REST router
    app; Linux tc shapes each direction of each link, changeable at runtime.
    """


def _register() -> None:
    # Each command module adds its commands here: from linkemu.cli import x; x.register(main)
    from linkemu.cli import router, shaping, testbed

    router.register(main)
    testbed.register(main)
    shaping.register(main)


_register()
