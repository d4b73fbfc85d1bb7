"""`linkemu router start|stop|status`: the os-ken REST router process."""

from __future__ import annotations

import sys

import click

from linkemu import router
from linkemu.model import Emulator
from nestednet.console import out_console, print_json, progress
from nestednet.errors import ExitStatus

STATE_DIR_OPTION = click.option(
    "--state-dir", envvar="LINKEMU_STATE_DIR", default=router.DEFAULT_STATE_DIR,
    show_default=True, type=click.Path(file_okay=False),
    help="Where linkemu records what it started (env LINKEMU_STATE_DIR).")
JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
START_TIMEOUT_OPTION = click.option(
    "--start-timeout", type=click.FloatRange(1), default=None,
    help=f"Seconds to wait for the router to come up [default: {router.START_TIMEOUT:.0f}; "
         f"{router.VM_START_TIMEOUT:.0f} inside scripts/kernel-vm].")


def register(group: click.Group) -> None:
    group.add_command(router_group)


@click.group("router")
def router_group() -> None:
    """Run the os-ken (Ryu) rest_router app that makes the emulator bridge a router.

    OpenFlow and REST listen on root's unix sockets (0600; REST in the state directory,
    OpenFlow in Open vSwitch's run directory): no other user reaches the router. `linkemu
    apply` (and `linkemu testbed up`) configure its addresses and routes; these commands
    run and inspect it (by hand: `curl --unix-socket STATE_DIR/rest.sock
    http://localhost/router/all`).
    """


@router_group.command("start")
@click.option("--bridge", default=Emulator().bridge, show_default=True,
              help="Open vSwitch bridge to connect (OpenFlow 1.3). Its ports must exist "
                   "already: rest_router learns them when the bridge joins.")
@START_TIMEOUT_OPTION
@STATE_DIR_OPTION
@JSON_OPTION
def start(bridge: str, start_timeout: float | None, state_dir: str, as_json: bool) -> None:
    """Start the router in the background and wait until BRIDGE has joined it."""
    if not as_json:
        progress(f"starting rest_router (OpenFlow and REST on unix sockets in {state_dir}) "
                 f"for bridge {bridge}")
    state = router.start(bridge, directory=state_dir, timeout=start_timeout)
    if as_json:
        print_json(router.status(state_dir).as_dict())
        return
    out_console.print(f"router running: pid {state.pid}, bridge {bridge} "
                      f"(datapath {state.dpid}) joined in {state.start_seconds} s; "
                      f"REST unix:{state.rest_socket}, log {state.log}")


@router_group.command("stop")
@STATE_DIR_OPTION
@JSON_OPTION
def stop(state_dir: str, as_json: bool) -> None:
    """Stop the router this machine recorded and remove its controller setting.

    Only the recorded process is signalled; running it twice is harmless.
    """
    result = router.stop(state_dir)
    if as_json:
        print_json(result)
    else:
        out_console.print(result["detail"])


@router_group.command("status")
@STATE_DIR_OPTION
@JSON_OPTION
def status(state_dir: str, as_json: bool) -> None:
    """Is the router process alive, its REST API answering and the bridge joined?

    Also lists the addresses and routes it holds. Exit status 0 when healthy, 1 not.
    """
    st = router.status(state_dir)
    if as_json:
        print_json(st.as_dict())
    else:
        _print_status(st)
    sys.exit(ExitStatus.OK if st.healthy else ExitStatus.FAILURE)


def _print_status(st: router.RouterStatus) -> None:
    verdict = "[green]healthy[/]" if st.healthy else "[red]NOT healthy[/]"
    s = st.state
    if s is None:
        out_console.print(f"router: {verdict}: {st.problems[0]}")
        return
    out_console.print(f"router: {verdict}  pid {s.pid}  bridge {s.bridge} "
                      f"(datapath {s.dpid or '?'})")
    out_console.print(f"  OpenFlow {s.controller}  REST unix:{s.rest_socket}  log {s.log}")
    if st.router is not None:
        out_console.print("  addresses: " + (", ".join(st.router["addresses"]) or "none"))
        routes = [f"{r['destination']} via {r['gateway']}" for r in st.router["routes"]]
        out_console.print("  routes:    " + (", ".join(routes) or "none"))
    for problem in st.problems:
        out_console.print(f"  [yellow]problem:[/] {problem}", soft_wrap=True)
