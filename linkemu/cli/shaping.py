"""`linkemu apply | set | show | clear | edit`: shape every link direction with tc."""

from __future__ import annotations

import sys

import click
from rich.table import Table

from linkemu import editor, shaping
from nestednet.capabilities.nodes import is_root
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.console import out_console, print_json, progress
from nestednet.errors import EnvironmentProblem
from nestednet.model import tcplan, units


def _fmt(value: object, kind: str) -> str:
    if value is None:
        return "-"
    if kind == "rate":
        return units.format_rate(int(value))  # type: ignore[arg-type]
    if kind == "time":
        return units.format_time(int(value))  # type: ignore[arg-type]
    if kind == "loss":
        return units.format_loss(float(value))  # type: ignore[arg-type]
    return str(value)


def _pair(configured: object, kernel: object, kind: str) -> str:
    if kernel is None:
        return f"{_fmt(configured, kind)} / -"
    if _fmt(configured, kind) == _fmt(kernel, kind):
        return _fmt(configured, kind)
    return f"[red]{_fmt(configured, kind)} / {_fmt(kernel, kind)}[/]"


@click.command("apply")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="Validate and print the plan; change nothing.")
@click.option("--shaper", type=click.Choice(tcplan.SHAPERS), default=shaping.DEFAULT_SHAPER,
              show_default=True,
              help="Class scheduler above the netem leaves. htb is the default because it "
                   "passes the head-of-line test; hfsc is kept for comparison.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan / result as JSON.")
def apply_cmd(file: str, dry_run: bool, shaper: str, as_json: bool) -> None:
    """Shape the links in FILE (thesis Linksimulation or native format).

    The file is validated completely first (errors name the place in the file and
    exit 2); then the plan is built and the kernel checked for the qdiscs it needs;
    only then is anything changed. Forward (client->server) is shaped on the
    emulator's server-side port, backward on the client-side port.

    \b
    Examples:
      linkemu apply scenarios/links/thesis-fig-4.6-testbed.json --dry-run
      linkemu apply links.json --shaper hfsc
    """
    table = shaping.validate(file)
    qdiscs = available_qdiscs() if is_root() else None
    if dry_run:
        plan = shaping.plan_apply(table, shaper, None)
        missing = shaping.missing_modules(shaper, table, qdiscs) if qdiscs is not None else None
        if as_json:
            print_json({**plan.as_dict(), "missing_modules": missing})
            return
        out_console.print(f"[bold]plan[/] for {len(table.links)} links, shaper {shaper}")
        if missing is None:
            out_console.print("kernel not probed (not root): qdisc availability unknown")
        elif missing:
            out_console.print(f"[red]this kernel lacks {', '.join(missing)}: `apply` would "
                              "refuse and change nothing[/]")
        if plan.router is None:
            out_console.print("router part: none (the emulator is a namespace of plain ports)")
        else:
            out_console.print(f"router part: bridge {plan.router.bridge} via the REST router")
            for a in plan.router.addresses:
                out_console.print(f"  address {a.address}  ({a.side} side)")
            for r in plan.router.routes:
                out_console.print(f"  route   {r.destination} via {r.gateway}  ({r.side} side)")
        for op in plan.tc.ops:
            params = " ".join(f"{k}={v}" for k, v in op.params.items())
            if "keys" in op.params:
                params += f" ({', '.join(map(tcplan.describe_u32_key, op.params['keys']))})"
            out_console.print(f"  {op.port:<8} {op.command:<10} {op.kind:<5} {op.handle:<7} "
                              f"{params}  [dim]# {op.what}[/]", soft_wrap=True)
        return
    if qdiscs is None:
        raise EnvironmentProblem("applying tc needs root", hint="run as root, or use --dry-run")
    plan = shaping.plan_apply(table, shaper, qdiscs)
    progress(f"applying {len(table.links)} links with {shaper} on "
             f"{', '.join(plan.tc.ports)}" + (f" in netns {plan.tc.netns}" if plan.tc.netns
                                              else ""))
    applied = shaping.execute(plan)
    if as_json:
        print_json(applied.as_dict())
    else:
        out_console.print(f"applied {len(table.links)} links ({shaper}, "
                          f"{'netem' if applied.netem else 'rate-only'} leaves)")


@click.command("set")
@click.argument("link")
@click.argument("direction", type=click.Choice(["forward", "backward", "both"]))
@click.option("--rate", help="New rate, e.g. 10Mbit, 500kbit, 1.5Mbit.")
@click.option("--delay", help="New one-way delay, e.g. 20ms, 500us, 0.")
@click.option("--jitter", help="New jitter (uniform, +/-), e.g. 2ms.")
@click.option("--loss", help="New loss in percent, e.g. 1%, 0.5.")
@click.option("--json", "as_json", is_flag=True, help="Print old and new values as JSON.")
def set_cmd(link: str, direction: str, rate: str | None, delay: str | None,
            jitter: str | None, loss: str | None, as_json: bool) -> None:
    """Change LINK's shape in DIRECTION in place, while traffic flows.

    LINK is ROUTER-CLIENT (e.g. R1-C2), a client name that is unique, or the
    client's IP. Only the given properties change; the class and netem are changed
    in place (no delete + re-add), no other link is touched.

    \b
    Example:  linkemu set R1-C1 forward --rate 5Mbit --delay 20ms
    """
    changes = shaping.parse_changes(rate=rate, delay=delay, jitter=jitter, loss=loss)
    done = shaping.set_link(link, direction, changes)
    if as_json:
        print_json([c.as_dict() for c in done])
        return
    for change in done:
        old, new = shaping.describe(change.old), shaping.describe(change.new)
        diff = ", ".join(f"{k} {old[k]} -> {new[k]}" for k in new if old[k] != new[k])
        out_console.print(f"{change.link} {change.direction}: {diff or 'unchanged'}")


@click.command("show")
@click.option("--json", "as_json", is_flag=True, help="Everything, including raw tc objects.")
def show_cmd(as_json: bool) -> None:
    """Configured values beside what the kernel actually has, per link and direction."""
    state = shaping.show()
    if as_json:
        print_json(state)
        return
    emu = state["emulator"]
    out_console.print(f"shaper {state['shaper']}, ports {emu['client_port']} (backward) / "
                      f"{emu['server_port']} (forward)"
                      + (f" in netns {emu['netns']}" if emu["netns"] else ""))
    out_console.print("one value: configured = kernel; 'cfg / kernel' where they differ; "
                      "'-': no such kernel object")
    table = Table("link", "dir", "class", "rate", "delay", "jitter", "loss", "limit", "ok")
    for row in state["links"]:
        cfg, krn = row["configured"], row["kernel"]
        cells = [_pair(cfg[key], krn[key], kind) for key, kind in (
            ("rate_bps", "rate"), ("delay_us", "time"), ("jitter_us", "time"),
            ("loss_pct", "loss"))]
        table.add_row(row["link"], row["direction"], row["class"], *cells,
                      _fmt(krn["limit"], ""), "yes" if row["in_sync"] else "[red]NO[/]")
    out_console.print(table)


@click.command("clear")
@click.option("--json", "as_json", is_flag=True)
def clear_cmd(as_json: bool) -> None:
    """Remove every tc object linkemu made (its root qdisc 1: on its two ports)."""
    cleared = shaping.clear()
    if as_json:
        print_json({"cleared_ports": cleared})
    elif cleared:
        out_console.print(f"removed linkemu's shaping from {', '.join(cleared)}")
    else:
        out_console.print("nothing to clear")


@click.command("edit")
def edit_cmd() -> None:
    """Interactive editor: pick router, client and direction, then type new values.

    As the thesis's link-edit prompt (Fig. 4.8).

    Current values are shown as defaults (Enter keeps them); every value is
    validated and applied in place at once. Works on a terminal and from a pipe.
    """
    applied = shaping.require_state()
    editor.run(applied.table, apply_change=shaping.set_link, interactive=sys.stdin.isatty())


def register(main: click.Group) -> None:
    for command in (apply_cmd, set_cmd, show_cmd, clear_cmd, edit_cmd):
        main.add_command(command)
