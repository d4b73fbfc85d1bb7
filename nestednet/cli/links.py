"""`nestednet link add|del|list`: inter-node links as flow pairs on the main bridge."""

from __future__ import annotations

import click

from nestednet.cli.nodes import LAB_OPTION
from nestednet.console import out_console, print_json
from nestednet.model.topology import parse_endpoint


def register(group: click.Group) -> None:
    group.add_command(link)


@click.group()
def link() -> None:
    """Join or split two nodes' iPHYs on the main bridge.

    An iPHY serves at most one link and a node pair gets at most one link (the
    paper's Algorithm 1). Links are flows, exactly as the CA installs them.

    \b
    Example:
      nestednet link add n1:iphy1 n2:iphy1
      nestednet exec n1 iphy1 -- ping -c1 192.168.2.3
    """


def _links(lab: str):
    # Lazy: the lab runtime (docker, pyroute2) would slow every command's start-up.
    from nestednet.lab.links import LabLinks
    from nestednet.lab.nodes import Lab

    return LabLinks.of(Lab.open(lab).record)


@link.command("add")
@LAB_OPTION
@click.argument("a")
@click.argument("b")
def add(lab: str, a: str, b: str) -> None:
    """Link endpoint A (NODE:IPHY) to endpoint B."""
    links = _links(lab)
    made = links.add(parse_endpoint(a, links.plan.shape), parse_endpoint(b, links.plan.shape))
    info = links.describe(made)
    out_console.print(f"linked {info['a']} ({info['a_address']}) <-> {info['b']} "
                      f"({info['b_address']})")


@link.command("del")
@LAB_OPTION
@click.argument("a")
@click.argument("b")
def delete(lab: str, a: str, b: str) -> None:
    """Remove the link between A and B."""
    links = _links(lab)
    gone = links.delete(parse_endpoint(a, links.plan.shape),
                        parse_endpoint(b, links.plan.shape))
    out_console.print(f"unlinked {gone[0]} <-> {gone[1]}")


@link.command("list")
@LAB_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def list_(lab: str, as_json: bool) -> None:
    """List the links present on the main bridge."""
    # Lazy: the lab runtime (docker, pyroute2) would slow every command's start-up.
    from nestednet.lab.links import broken_because, dead_nodes
    from nestednet.lab.nodes import Lab

    opened = Lab.open(lab)
    links = _links(lab)
    dead = dead_nodes(opened.client, lab, opened.shape.nodes)
    rows = [{**links.describe(x), "broken": broken_because(x, dead)} for x in links.links()]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        out_console.print(f"{row['a']} ({row['a_address']}) <-> {row['b']} ({row['b_address']})"
                          + (f"  BROKEN: {row['broken']}" if row["broken"] else ""))
    if dead:
        out_console.print(f"dead nodes: {', '.join(f'n{k}' for k in sorted(dead))}; a dead "
                          f"node cannot be brought back in place: `nestednet delete --lab "
                          f"{lab}` and create the lab again")
    if not rows:
        out_console.print("no links")
