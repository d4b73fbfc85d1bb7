"""`nestednet create|status|exec|swap|delete|cleanup`: parse, call the API (nestednet.api),
print."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from nestednet.console import FiniteFloat, err_console, out_console, print_json
from nestednet.model.component_spec import (
    COMPONENT_CAPS,
    parse_component_caps,
    parse_component_images,
)
from nestednet.model.topology import DEFAULT_LAB
from nestednet.routing import strategies

LAB_OPTION = click.option("--lab", default=DEFAULT_LAB, show_default=True, metavar="NAME",
                          help="Lab name: a letter then up to 7 letters/digits.")
ROUTING_OPTION = click.option(
    "--routing", type=click.Choice(list(strategies.STRATEGIES)), default=strategies.DEFAULT,
    show_default=True,
    help="Routing to node addresses (10.100.0.i for node i): none (your code routes), "
         "direct (the GNAB agent adds a route per link, one hop) or babel (babeld in every "
         "component, any number of hops).")
COMPONENT_CAPS_OPTION = click.option(
    "--component-caps", "component_caps", default=",".join(COMPONENT_CAPS), show_default=True,
    metavar="LIST", callback=lambda _ctx, _param, value: parse_component_caps(value),
    help="Capabilities added to Docker's defaults in every GNAB and iPHY, effective only "
         "in their own namespaces: `none` or a comma list of NET_ADMIN, NET_RAW.")


def register(group: click.Group) -> None:
    for command in (create, status, exec_, swap, delete, cleanup):
        group.add_command(command)


@click.command()
@click.option("--nodes", "-n", type=int, required=True, help="Number of nodes N.")
@click.option("--iphys", "-m", type=int, required=True, help="iPHYs per node M.")
@LAB_OPTION
@click.option("--cpus", type=FiniteFloat(), default=None,
              help="CPU limit per component (e.g. 0.5).")
@click.option("--memory", type=int, default=None, metavar="MB",
              help="Memory limit per component, in MB (enforced by its cgroup).")
@click.option("--jobs", "-j", type=int, default=None,
              help="Nodes built in parallel (default: 2 x cores, at most 8).")
@click.option("--timings", is_flag=True, help="Print how long each phase took.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the lab's record as JSON (create_s, timings per phase, plan, "
                   "...); the progress bars still go to stderr.")
@click.option("--flat", is_flag=True,
              help="Baseline: one plain container per node, its components as processes "
                   "sharing one network namespace (the Containernet way; see "
                   "nestednet.lab.flat). Limits then apply to the whole node.")
@ROUTING_OPTION
@COMPONENT_CAPS_OPTION
@click.option("--image", "user_images", multiple=True, metavar="ROLE=IMAGE",
              callback=lambda _ctx, _param, value: parse_component_images(value),
              help="Run your own image for every gnab or every iphy (repeatable), taken "
                   "from the host's engine. NestedNet's agent and routing run beside it in "
                   "a sidecar sharing its network namespace; its own process must keep "
                   "running.")
@click.option("--hosts", "hosts_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Spread the nodes over the hosts of this file "
                                 "(nestednet/schemas/hosts.schema.json): parents become "
                                 "Docker Swarm services, VXLAN joins the hosts' main bridges. "
                                 "A control VXLAN per host joins the GNABs to `run`'s CA. "
                                 "Each host needs its helper: `nestednet hosts prepare` "
                                 "(docs/multihost.md).")
@click.option("--spread/--pack", "spread", default=True, show_default=True,
              help="With --hosts: even out the nodes over the hosts, or fill each host up "
                   "to its capacity in file order.")
@click.option("--place", "pins", multiple=True, metavar="NODE=HOST",
              help="With --hosts: put NODE on HOST (repeatable), before the others are placed.")
def create(nodes: int, iphys: int, lab: str, cpus: float | None, memory: int | None,
           jobs: int | None, timings: bool, as_json: bool, flat: bool, routing: str,
           component_caps: tuple[str, ...], user_images: tuple[tuple[str, str], ...],
           hosts_file: Path | None, spread: bool, pins: tuple[str, ...]) -> None:
    """Create a lab of N nodes, each a GNAB plus M iPHYs.

    Every node is a Docker-in-Docker parent `<lab>-n<i>` holding an inner engine
    and an internal OVS bridge; its GNAB and iPHYs are child containers on
    192.168.0.0/24 (GNAB .1, iPHY j .(10+j)). Every iPHY also has an address on the
    inter-node net (192.168.2.0/24, wider when needed) through a port of the host
    bridge `<lab>-main`, which forwards nothing until `nestednet link add`. Every
    GNAB reaches the CA's address (10.99.0.1) on the control net. Every node has a
    routable address, 10.100.0.i on its GNAB's loopback, which --routing makes
    reachable across links (components may add routes themselves: they hold
    NET_ADMIN in their own namespaces unless --component-caps none).

    \b
    Example:
      nestednet create --nodes 2 --iphys 2 --memory 64
      nestednet exec n1 iphy1 -- ping -c1 192.168.0.1
      nestednet create --nodes 5 --iphys 2 --routing babel --lab mh
      nestednet create -n 6 -m 2 --hosts hosts.json --place n1=hostA --lab mh
    """
    # Lazy: the API loads the lab runtime (docker, pyroute2): a slow start-up otherwise.
    from nestednet.api.lab import Lab

    plan = Lab.check(lab, nodes=nodes, iphys=iphys, routing=routing, flat=flat,
                     hosts=hosts_file, images=dict(user_images), cpus=cpus, memory=memory,
                     component_caps=component_caps, jobs=jobs,
                     placement="spread" if spread else "packed", pins=pins)
    columns = (TextColumn("{task.description:<14}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=False) as bar:
        tasks = {phase: bar.add_task(phase, total=nodes) for phase in plan.phases}
        made_lab = Lab.build(plan, keep=True,
                             progress=lambda phase, node: bar.advance(tasks[phase]))
    meta = made_lab.meta
    made_lab.close()
    if as_json:
        print_json(meta)
        return
    made = f"gnab + {iphys} iPHYs)" + (f" over {len(set(meta['placement'].values()))} hosts"
                                       if "placement" in meta else "")
    out_console.print(f"{plan.title}lab {lab}: {nodes} nodes x ({made} created in "
                      f"{meta['create_s']:.1f} s (datapath {meta['datapath']}, parents "
                      f"{meta['parent_security']}, routing {routing})")
    if timings:
        table = Table("phase", "wall s", "mean per node s")
        for phase, row in meta["timings"].items():
            table.add_row(phase, f"{row['wall_s']:.2f}", f"{row['mean_per_node_s']:.2f}")
        out_console.print(table)


@click.command()
@LAB_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def status(lab: str, as_json: bool) -> None:
    """Show a lab: nodes, components and their state, addresses, links, memory."""
    # Lazy: the API loads the lab runtime (docker, pyroute2).
    from nestednet.api.lab import Lab

    data = Lab.open(lab).status()
    if as_json:
        print_json(data)
        return
    plan = data["address_plan"]
    out_console.print(f"lab {data['lab']}: {data['shape']['nodes']} nodes x "
                      f"{data['shape']['iphys']} iPHYs, datapath {data['datapath']}, "
                      f"main bridge {data['main_bridge']}")
    out_console.print(f"nets: intra {plan['intra']}, inter {plan['inter']}, control "
                      f"{plan['control']} (CA {data['ca']['address']} in netns "
                      f"{data['ca']['netns']})")
    out_console.print(f"routing {data.get('routing', 'none')}; node addresses "
                      f"{plan.get('node', '-')} (one /32 per node on its GNAB's loopback)")
    hosts = "placement" in data
    if hosts:
        out_console.print("hosts: " + ", ".join(f"{h['name']} ({h['address']})"
                                                for h in data["hosts"]))
    table = Table("node", *(["host"] if hosts else []), "node address", "state", "mem MB",
                  "component", "state", "intra", "inter/ctl")
    for node in data["nodes"]:
        first = True
        for comp in node["components"] or [{}]:
            table.add_row(node["node"] if first else "",
                          *([node.get("host", "") if first else ""] if hosts else []),
                          node.get("node_address", "") if first else "",
                          node["state"] if first else "",
                          str(node.get("memory_mb")) if first else "",
                          comp.get("component", ""), _component_state(comp),
                          _ip(comp.get("intra", "")),
                          _ip(comp.get("inter", comp.get("control", ""))))
            first = False
    out_console.print(table)
    if data["links"]:
        for link in data["links"]:
            across = (f" [{' <-> '.join(link['hosts'])}]" if len(link.get("hosts", [])) > 1
                      else "")
            out_console.print(f"link {link['a']} ({link['a_address']}) <-> {link['b']} "
                              f"({link['b_address']}){across}")
    else:
        out_console.print("no links (nodes cannot reach each other; `nestednet link add`)")


def _component_state(comp: dict) -> str:
    """Its state, and the OOM kills its memory limit caused (`create --memory`)."""
    kills = comp.get("oom_kills")
    text = comp.get("state", "")
    if kills:
        text += f", {kills} OOM kill{'s' if kills != 1 else ''}"
    if comp.get("oom_killed"):
        text += " (its main process: OOM)"
    return text


def _ip(address: str) -> str:
    return address.split("/")[0]


@click.command("exec", context_settings={"ignore_unknown_options": True})
@LAB_OPTION
@click.argument("node")
@click.argument("component")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(lab: str, node: str, component: str, command: tuple[str, ...]) -> None:
    """Run COMMAND in one component; its output and exit status are passed through.

    \b
    Example:
      nestednet exec n1 iphy2 -- ip -br addr
    """
    # Lazy: the API loads the lab runtime (docker, pyroute2).
    from nestednet.api.lab import Lab

    def write(stream):
        def _write(data: bytes) -> None:
            stream.buffer.write(data)
            stream.flush()
        return _write

    target = Lab.open(lab).node(node).component(component)
    result = target.exec(list(command), stdout=write(sys.stdout), stderr=write(sys.stderr))
    sys.exit(result.exit_code)


@click.command()
@LAB_OPTION
@click.argument("node")
@click.argument("component")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--restart", is_flag=True,
              help="Restart the component afterwards (only it; siblings keep running).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def swap(lab: str, node: str, component: str, path: Path, restart: bool,
         as_json: bool) -> None:
    """Copy user code PATH into one component (at /opt/nestednet/user).

    On start the component runs /opt/nestednet/user/run (if executable) or
    /opt/nestednet/user/main.py; the directory also comes first on PYTHONPATH, so a
    `nestednet/agent` package in it replaces the GNAB agent. With --restart the
    component is restarted and re-wired with its old addresses; links stay.
    """
    # Lazy: the API loads the lab runtime (docker, pyroute2).
    from nestednet.api.lab import Lab

    result = Lab.open(lab).node(node).component(component).swap(path, restart=restart)
    if as_json:
        print_json(result)
    else:
        out_console.print(f"copied {path} to {node} {component}:{result['to']}"
                          + (", restarted it" if result["restarted"] else
                             " (not restarted; add --restart)"))


@click.command()
@LAB_OPTION
def delete(lab: str) -> None:
    """Remove everything the lab created (containers, veths, bridges, netns, files)."""
    # Lazy: the API loads the lab runtime (docker, pyroute2).
    from nestednet.api.lab import delete_detailed

    removed = delete_detailed(lab)
    if removed is None:
        out_console.print(f"no lab {lab}: nothing to delete")
        return
    out_console.print(f"lab {lab} deleted ({len(removed.items)} resources)")
    for item in removed.kept:
        err_console.print(f"kept: {item}", highlight=False, soft_wrap=True)


@click.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--hosts", "hosts_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, metavar="FILE",
              help="Instead: remove what deleted labs left on these hosts while they were "
                   "not reachable (`delete` says so and records it), from each host that "
                   "answers now; nothing on this machine is looked at.")
def cleanup(dry_run: bool, as_json: bool, hosts_file: Path | None) -> None:
    """Remove leftovers of crashed runs, found by label, name and lab records.

    Unfinished labs whose create is no longer running, and containers, OVS bridges
    and namespaces carrying NestedNet marks but no lab record. Complete labs are
    kept (remove them with `nestednet delete`); nothing without our marks is touched.

    A multi-host lab deleted while one of its hosts was lost keeps its part there;
    once the host is back, `--hosts FILE` removes it (found there by the lab's label
    and names), and does only that.

    \b
      nestednet cleanup --hosts hosts.json
    """
    # Lazy: the API loads the lab runtime (docker, pyroute2).
    from nestednet.api.lab import cleanup as lab_cleanup

    result = lab_cleanup(dry_run=dry_run, hosts=hosts_file)
    if as_json:
        print_json({"dry_run": dry_run, "removed": result.items, "kept": result.kept})
        return
    verb = "would remove" if dry_run else "removed"
    for item in result.items:
        out_console.print(f"{verb} {item}")
    for item in result.kept:
        out_console.print(f"kept {item}")
    if not result.items:
        out_console.print("nothing to clean up")
