"""`nestednet hosts plan|prepare|unprepare`: where a multi-host lab's nodes would go and
which tunnels join the hosts (without touching any host); the per-host helper every
multi-host lab needs, started and removed as a Swarm global service (issue #16)."""

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
    """Labs over several hosts (Docker Swarm, VXLAN between main bridges)."""


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


HOSTS_FILE = click.option("--hosts", "hosts_file",
                          type=click.Path(dir_okay=False, path_type=Path), required=True,
                          help="Hosts file (nestednet/schemas/hosts.schema.json).")


@hosts.command()
@HOSTS_FILE
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds every host's helper may take to answer.")
def prepare(hosts_file: Path, timeout: float) -> None:
    """Start the per-host helper on every host: a Swarm global service (idempotent).

    Multi-host labs reach each host's kernel (tunnels, veths, tc) and its parents'
    sockets through it. Each host needs the helper image (`nestednet images build`
    makes it; `docker save | docker load` it there) and, with the hosts file's `ssl`,
    the host's key, certificate and the clients' CA under STATE_DIR/pki/.

    \b
      nestednet hosts prepare --hosts hosts.json
    """
    # Lazy: the docker SDK adds start-up time to `hosts plan`.
    from nestednet import images
    from nestednet.hostd import service

    hostset = pl.load_hosts(hosts_file)
    hellos = service.prepare(service.manager_of(hostset), hostset, images.HOSTD_IMAGE, timeout)
    for name, hello in hellos.items():
        click.echo(f"{name}: helper answering ({service.service_name(hostset)}, "
                   f"{'TLS' if hostset.ssl else 'plain TCP'} on port "
                   f"{service.port_of(hostset)}, state {hello['state_dir']})")


@hosts.command()
@HOSTS_FILE
@click.option("--all", "every", is_flag=True,
              help="Remove every helper service of ours, whatever its port.")
def unprepare(hosts_file: Path, every: bool) -> None:
    """Remove the per-host helper service (labs on these hosts stop working).

    \b
      nestednet hosts unprepare --hosts hosts.json
    """
    # Lazy: the docker SDK adds start-up time to `hosts plan`.
    from nestednet.hostd import service

    hostset = pl.load_hosts(hosts_file)
    removed = service.remove(service.manager_of(hostset), None if every else hostset)
    click.echo("removed: " + (", ".join(removed) if removed else "nothing"))
