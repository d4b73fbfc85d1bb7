"""`linkemu testbed up|down`: the whole emulator on one machine (thesis §4.8)."""

from __future__ import annotations

import click

from linkemu import testbed
from linkemu.cli.router import (
    JSON_OPTION,
    START_TIMEOUT_OPTION,
    STATE_DIR_OPTION,
)
from nestednet.console import out_console, print_json, progress


def register(group: click.Group) -> None:
    group.add_command(testbed_group)


@click.group("testbed")
def testbed_group() -> None:
    """Build or remove a software testbed: clients, edge router, emulator, server.

    Clients C1..Cn live in network namespaces behind an edge-router namespace; a
    trunk joins it to the emulator's OVS bridge (made a router by rest_router), whose
    other port leads to a server namespace. Addresses are in 198.18.0.0/15. `up`
    writes a links file that `linkemu apply` takes as it is.
    """


@testbed_group.command("up")
@click.option("--clients", type=click.IntRange(1, testbed.MAX_CLIENTS), default=2,
              show_default=True, help="Number of client namespaces.")
@click.option("--prefix", default="le", show_default=True,
              help="Start of every name created (namespaces, interfaces, bridge).")
@START_TIMEOUT_OPTION
@STATE_DIR_OPTION
@JSON_OPTION
def up(clients: int, prefix: str, start_timeout: float | None, state_dir: str,
       as_json: bool) -> None:
    """Build the testbed and start and configure its router.

    Example: `linkemu testbed up --clients 3`, then `ip netns exec le-c1 ping 198.19.0.2`
    and `linkemu apply <the links file printed>`.
    """
    layout = testbed.Layout(clients=clients, prefix=prefix)
    if not as_json:
        progress(f"building testbed {prefix}: {clients} clients, edge router, bridge "
                 f"{layout.bridge}, server")
    built = testbed.up(layout, directory=state_dir, start_timeout=start_timeout)
    info = built.as_dict()
    if as_json:
        print_json(info)
        return
    out_console.print(f"testbed up in {built.timings['total']} s ({built.datapath} datapath)")
    for c in info["clients"]:
        out_console.print(f"  {c['name']}  {c['address']:<12}  netns {c['namespace']}")
    out_console.print(f"  server {info['server']}  netns {info['server_namespace']}")
    out_console.print(f"  router pid {info['router']['pid']}, REST {info['router']['rest']}")
    out_console.print(f"links file: {built.links_file}  (linkemu apply {built.links_file})")


@testbed_group.command("down")
@STATE_DIR_OPTION
@JSON_OPTION
def down(state_dir: str, as_json: bool) -> None:
    """Remove exactly what `up` created (recorded in the state dir); idempotent."""
    removed = testbed.down(state_dir)
    if as_json:
        print_json({"removed": removed})
    elif removed:
        out_console.print("removed: " + ", ".join(removed), soft_wrap=True)
    else:
        out_console.print("no testbed recorded: nothing to remove")
