"""The `linkemu` command line: parses, calls the library, prints.

- `router`: `linkemu router start|stop|status` (os-ken rest_router on a bridge).
- `testbed`: `linkemu testbed up|down` (clients, edge router, emulator, server).
- `shaping`: apply, set, show, edit, clear (links files to router + tc).
"""

from __future__ import annotations

import click

from linkemu.cli import router, shaping, testbed
from nestednet.console import ErrorHandlingGroup


@click.group(cls=ErrorHandlingGroup, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """linkemu: give every client<->server direction its own rate, delay, jitter and loss.

    An Open vSwitch bridge becomes a router through the os-ken (Ryu) REST router
    app; Linux tc shapes each direction of each link, changeable at runtime.
    """


for _module in (router, testbed, shaping):
    _module.register(main)
