"""`nestednet hosts plan`: where a multi-host lab's nodes would go and which tunnels join
the hosts, from a hosts file, without touching any host (issue #16; `create --hosts` is
not built yet)."""

from __future__ import annotations

from pathlib import Path

import click

from nestednet.console import print_json
from nestednet.model import placement as pl
from nestednet.model import topology as topo
from nestednet.model.addressing import AddressPlan
from nestednet.model.tunnels import DataPlane, inner_mtu


def register(group: click.Group) -> None:
    group.add_command(hosts)


@click.group()
def hosts() -> None:
    """Labs over several hosts (Docker Swarm, VXLAN between main bridges): planning."""


@hosts.command()
@click.option("--hosts", "hosts_file", type=click.Path(dir_okay=False, path_type=Path),
              required=True, help="Hosts file (nestednet/schemas/hosts.schema.json).")
@click.option("--lab", default=topo.DEFAULT_LAB, show_default=True, help="Lab name.")
@click.option("-n", "--nodes", type=int, required=True, help="Number of nodes.")
@click.option("-m", "--iphys", type=int, default=2, show_default=True, help="iPHYs per node.")
@click.option("--placement", type=click.Choice(pl.STRATEGIES), default=pl.DEFAULT_STRATEGY,
              show_default=True, help="spread: each node to the host with the fewest nodes; "
                                      "packed: fill hosts in file order up to capacity.")
@click.option("--place", "pins", multiple=True, metavar="NODE=HOST",
              help="Pin a node to a host (repeatable), e.g. --place n1=hostA.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(hosts_file: Path, lab: str, nodes: int, iphys: int, placement: str,
         pins: tuple[str, ...], as_json: bool) -> None:
    """Show which host each node goes to and the VXLAN tunnels between the hosts.

    \b
      nestednet hosts plan --hosts hosts.json -n 6 -m 2
      nestednet hosts plan --hosts hosts.json -n 6 --place n1=hostB --placement packed
    """
    topo.check_lab_name(lab)
    shape = topo.Shape(nodes, iphys)
    hostset = pl.load_hosts(hosts_file)
    where = pl.place(shape, hostset, placement, pl.parse_pins(pins, shape, hostset))
    dp = DataPlane.of(lab, AddressPlan.for_shape(shape), hostset, where)
    out = {"lab": lab, "placement": placement, "iphy_mtu": inner_mtu(),
           "hosts": [{"host": h.name, "address": h.address,
                      "nodes": [topo.node_name(n) for n in pl.nodes_on(where, h.name)],
                      "tunnels": [{"port": t.name, "peer": t.peer, "remote": t.remote_ip,
                                   "vni": t.vni, "ofport": t.ofport}
                                  for t in dp.tunnels.get(h.name, [])]}
                     for h in hostset.hosts]}
    if as_json:
        print_json(out)
        return
    for h in out["hosts"]:
        click.echo(f"{h['host']} ({h['address']}): {', '.join(h['nodes']) or 'no nodes'}")
        for t in h["tunnels"]:
            click.echo(f"  {t['port']} -> {t['peer']} ({t['remote']}) vni {t['vni']}")
    click.echo(f"iPHY MTU {out['iphy_mtu']} (VXLAN + 802.1Q tag)")
