"""`nestednet link add|set|del|list`: inter-node links as flow pairs on the main bridge,
shaped (rate, delay, jitter, loss) on the receiving iPHY's port."""

from __future__ import annotations

from typing import Any

import click

from nestednet.cli.nodes import LAB_OPTION
from nestednet.console import out_console, print_json
from nestednet.errors import UsageError
from nestednet.model.link_properties import LinkProperties, PropertyError, parse_properties
from nestednet.model.shaping_policy import FULL, MODES

DIRECTION_CHOICES = ("both", "a-to-b", "b-to-a")


def register(group: click.Group) -> None:
    group.add_command(link)


@click.group()
def link() -> None:
    """Join, shape or split two nodes' iPHYs on the main bridge.

    An iPHY serves at most one link and a node pair gets at most one link (the
    paper's Algorithm 1). Links are flows, exactly as the CA installs them. A link
    with properties is shaped per direction on the egress toward the receiving
    iPHY (HTB for the rate, netem for delay, jitter and loss); the shaping goes in
    before the flows, and `link set` changes it in place.

    \b
    Example:
      nestednet link add n1:iphy1 n2:iphy1 --rate 20Mbit --delay 5ms
      nestednet link set n1:iphy1 n2:iphy1 --rate 5Mbit --direction a-to-b
      nestednet link list
      nestednet exec n1 iphy1 -- ping -c1 192.168.2.3
    """


def property_options(func: Any) -> Any:
    for option in reversed((
            click.option("--rate", help="Rate, e.g. 20Mbit, 500kbit, 1Gbit (HTB)."),
            click.option("--delay", help="One-way delay, e.g. 5ms, 800us (needs sch_netem)."),
            click.option("--jitter", help="Uniform jitter around the delay, at most the delay "
                                          "(needs sch_netem)."),
            click.option("--loss", help="Random loss in percent, e.g. 1% (needs sch_netem)."),
            click.option("--shaping", type=click.Choice(MODES), default=FULL, show_default=True,
                         help="rate-only: shape the rate with HTB and leave delay, jitter and "
                              "loss out (a kernel without sch_netem)."),
            click.option("--keep-order", is_flag=True,
                         help="Jitter without reordering: netem paced at the link's rate "
                              "(costs one packet time at that rate)."))):
        func = option(func)
    return func


def _given(rate: str | None, delay: str | None, jitter: str | None,
           loss: str | None) -> dict[str, str]:
    values = {"rate": rate, "delay": delay, "jitter": jitter, "loss": loss}
    return {k: v for k, v in values.items() if v is not None}


def _open(lab: str):
    """The lab, through the API, for one command."""
    # Lazy: the API loads the lab runtime (docker, pyroute2): a slow start-up otherwise.
    from nestednet.api.lab import Lab

    return Lab.open(lab)


@link.command("add")
@LAB_OPTION
@click.argument("a")
@click.argument("b")
@property_options
def add(lab: str, a: str, b: str, rate: str | None, delay: str | None, jitter: str | None,
        loss: str | None, shaping: str, keep_order: bool) -> None:
    """Link endpoint A (NODE:IPHY) to endpoint B, shaped alike in both directions."""
    given = _given(rate, delay, jitter, loss)
    properties = _properties(given) if given else None
    made = _open(lab).link(a, b, **given, shaping_mode=shaping, keep_order=keep_order)
    shaped = f", {properties.describe()} each way" if properties is not None else ""
    out_console.print(f"linked {made.a} ({made.a_address}) <-> {made.b} "
                      f"({made.b_address}){shaped}")


@link.command("set")
@LAB_OPTION
@click.argument("a")
@click.argument("b")
@property_options
@click.option("--direction", "which", type=click.Choice(DIRECTION_CHOICES), default="both",
              show_default=True, help="Which direction to change (a-to-b: from A to B).")
def set_(lab: str, a: str, b: str, rate: str | None, delay: str | None, jitter: str | None,
         loss: str | None, shaping: str, keep_order: bool, which: str) -> None:
    """Change an existing link's properties in place (tc change: flows keep running).

    Only the options given change; the rest keep their configured values.
    """
    given = _given(rate, delay, jitter, loss)
    if not given:
        raise UsageError("nothing to set", hint="give --rate, --delay, --jitter or --loss")
    _properties(given)
    changed = _open(lab).get_link(a, b).set(**given, direction=which, shaping_mode=shaping,
                                            keep_order=keep_order)
    for d in changed:
        out_console.print(f"{d.name}: {d.properties.describe()}")
    if not changed:
        out_console.print("unchanged")


@link.command("del")
@LAB_OPTION
@click.argument("a")
@click.argument("b")
def delete(lab: str, a: str, b: str) -> None:
    """Remove the link between A and B (flows first, then its shaping)."""
    gone = _open(lab).get_link(a, b)
    gone.remove()
    out_console.print(f"unlinked {gone.a} <-> {gone.b}")


@link.command("list")
@LAB_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_(lab: str, as_json: bool) -> None:
    """List the links on the main bridge: configured properties beside the kernel's, and
    which links a dead node broke."""
    opened = _open(lab)
    rows = [link.as_dict() for link in opened.links()]
    dead = opened.dead_nodes()
    if as_json:
        print_json(rows)
        return
    for row in rows:
        out_console.print(f"{row['a']} ({row['a_address']}) <-> {row['b']} ({row['b_address']})"
                          + (f"  BROKEN: {row['broken']}" if row["broken"] else ""),
                          highlight=False)
        for d in row["directions"]:
            out_console.print(f"  {d['from']} -> {d['to']}: configured "
                              f"{_describe(d['configured'])}, kernel {_kernel(d['kernel'])}",
                              highlight=False, soft_wrap=True)
    if dead:
        out_console.print(f"dead nodes: {', '.join(f'n{k}' for k in sorted(dead))}; a dead "
                          f"node cannot be brought back in place: `nestednet delete --lab "
                          f"{lab}` and create the lab again")
    if not rows:
        out_console.print("no links")


def _properties(given: dict[str, str]) -> LinkProperties:
    try:
        return parse_properties(given)
    except PropertyError as exc:
        raise UsageError(f"--{exc.field}: {exc}") from None


def _describe(configured: dict | None) -> str:
    return "unshaped" if configured is None else LinkProperties(**configured).describe()


def _kernel(held: dict | None) -> str:
    if held is None:
        return "no tree"
    parts = [f"rate {held['rate_bps']} bit/s"]
    if held["delay_us"] is not None:
        parts.append(f"delay {held['delay_us']} us, jitter {held['jitter_us']} us, loss "
                     f"{held['loss_pct']} %, limit {held['netem_limit']}")
    else:
        parts.append("no netem")
    return ", ".join(parts)
