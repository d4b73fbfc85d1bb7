"""`nestednet bench`: parse, run nestednet.bench, print where the results are."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nestednet.console import out_console, print_json, progress
from nestednet.errors import ExitStatus

EXPERIMENT_NAMES = ("memory", "links", "stress", "scaling", "startup", "fidelity", "routing",
                    "all", "capacity")
CAPACITY_OPTIONS = ("shell", "stations", "ground_links", "host_cores", "host_memory_gb",
                    "headroom", "costs")


def register(group: click.Group) -> None:
    group.add_command(bench)


def _node_counts(ctx: click.Context, param: click.Parameter, value: str | None
                 ) -> tuple[int, ...]:
    """`12,48,120` -> (12, 48, 120); anything else is a usage error naming the option."""
    if value is None:
        return ()
    try:
        counts = tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma list of node counts "
                                 "(e.g. 12,48,120)") from None
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"{value!r}: every node count must be 1 or more")
    return counts


@click.command()
@click.argument("experiment", type=click.Choice(EXPERIMENT_NAMES))
@click.option("--quick", is_flag=True,
              help="Short transfers, few trials and small labs: the whole suite in minutes.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output directory (default ./results/<timestamp>).")
@click.option("--seed", type=int, default=1, show_default=True,
              help="Seed for the random choice of nodes, links and iPHYs.")
@click.option("--nodes", "nodes", callback=_node_counts, metavar="LIST",
              help="startup: node counts to create instead of the mode's (e.g. "
                   "12,48,120; each is created once per repeat, nested and flat). routing: "
                   "line lengths instead of 12,24,48 (the hops series is then left out).")
@click.option("--repeats", type=click.IntRange(1, 20), default=None,
              help="startup: creations per node count (default 1); routing: "
                   "measurements per point (default 3, quick 2); the median is reported.")
@click.option("--shell", metavar="PLANESxSATS", default=None,
              help="capacity: the Walker shell, +Grid ISLs (default 72x22, 1,584 satellites).")
@click.option("--stations", type=click.IntRange(0), default=None,
              help="capacity: ground stations (default 100).")
@click.option("--ground-links", type=click.IntRange(0), default=None,
              help="capacity: links per ground station (default 1: nearest/highest policy).")
@click.option("--host-cores", type=click.FloatRange(min=1), default=None,
              help="capacity: cores per host (default 16).")
@click.option("--host-memory-gb", type=click.FloatRange(min=1), default=None,
              help="capacity: memory per host, GB (default 64).")
@click.option("--headroom", type=click.FloatRange(0.1, 1.0), default=None,
              help="capacity: share of each host planned for (default 0.8).")
@click.option("--costs", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="capacity: unit costs measured by scripts/bench/capacity.py "
                                 "costs (one host) or check --fit (one and several hosts; "
                                 "default: the constants in docs/capacity.md).")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON too.")
def bench(experiment: str, quick: bool, out: Path | None, seed: int, nodes: tuple[int, ...],
          repeats: int | None, as_json: bool, **model: object) -> None:
    """Reproduce the NestedNet paper's measurements, nested and flat side by side.

    \b
    EXPERIMENT is one of:
      memory   memory per node, part by part (paper Table I)
      links    intra/inter-node TCP throughput and RTT, 1/2/4 connections (Tables II/III)
      stress   isolation: D = (T1 - T2) / T1 under a 120-stream stress (Fig. 3)
      scaling  intra-node throughput as iPHYs per node grow (Fig. 4)
      startup  creation time vs node count (Table IV)
      fidelity configured vs measured rate, delay and loss on a shaped inter-node link
               (delay and loss need sch_netem; without it the rate alone, and why)
      routing  babel convergence after a link appears vs hops and nodes (not in
               the paper, nor in `all`)
      all      every paper experiment and one report.md
      capacity hosts needed for a constellation (a model from measured costs: no
               lab, no root; docs/capacity.md). Not Fig. 4: that is `scaling`.

    Each paper experiment writes NAME.json, NAME.png and NAME.md into --out. Labs are created under
    names starting with `b` and deleted afterwards. Needs root, like `create`.

    \b
    Examples:
      nestednet bench all --quick --out results/quick
      nestednet bench startup --nodes 12,48,120 --out results/scale
      nestednet bench capacity --shell 72x22 --stations 100 --host-cores 16 \\
          --host-memory-gb 64
    """
    given = [name for name in CAPACITY_OPTIONS if model[name] is not None]
    if experiment == "capacity":
        _capacity(model, as_json)
        return
    if given:
        raise click.UsageError(f"--{given[0].replace('_', '-')} is for `bench capacity` only")
    # Lazy: the benchmarks load docker, pyroute2 and matplotlib (slow start-up otherwise).
    from nestednet.bench import common, suite

    out = out or Path("results") / common.timestamp()
    results = suite.run_suite(experiment, out, quick=quick, seed=seed, log=progress,
                              nodes=nodes, repeats=repeats)
    if as_json:
        print_json(results)
    failed = [name for name, r in results.items() if "error" in r]
    for name, result in results.items():
        if "error" in result:
            out_console.print(f"{name}: FAILED ({result['error']})")
        else:
            out_console.print(f"{name}: {out / result['files']['markdown']} "
                              f"({result['duration_s']} s)")
    if len(results) > 1:
        out_console.print(f"report: {out / 'report.md'}")
    if failed:
        sys.exit(ExitStatus.FAILURE)


def _shell(text: str) -> tuple[int, int]:
    try:
        planes, per_plane = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected PLANESxSATS, e.g. 72x22",
                                 param_hint="--shell") from None
    if planes < 1 or per_plane < 1:
        raise click.BadParameter(f"{text!r}: planes and satellites must be 1 or more",
                                 param_hint="--shell")
    return planes, per_plane


def _capacity(model: dict, as_json: bool) -> None:
    """`bench capacity`: the model's prediction, printed; nothing is created."""
    import json

    # Lazy, as the benchmarks above: the CLI starts without loading them.
    from nestednet.model import capacity as cap

    planes, per_plane = _shell(model["shell"] or "72x22")
    costs = cap.MODEL
    if model["costs"] is not None:
        try:
            costs = cap.CostModel.from_dict(json.loads(model["costs"].read_text()), cap.MODEL)
        except (ValueError, TypeError, AttributeError) as exc:
            raise click.BadParameter(f"{model['costs']}: {exc}", param_hint="--costs") from None
    stations = 100 if model["stations"] is None else model["stations"]
    ground = 1 if model["ground_links"] is None else model["ground_links"]
    workload = cap.walker_grid(planes, per_plane, stations, ground)
    host = cap.HostSpec(cores=model["host_cores"] or 16.0,
                        memory_mb=(model["host_memory_gb"] or 64.0) * 1024,
                        headroom=model["headroom"] or 0.8)
    try:
        p = cap.plan(costs, workload, host)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if as_json:
        print_json(p.as_dict())
        return
    each = cap.node_usage(p.costs, workload.iphys, workload.links / workload.nodes)
    out_console.print(
        f"{planes} x {per_plane} shell (+Grid) and {stations} ground stations: "
        f"{workload.nodes} nodes x (1 + {workload.iphys}), {workload.links} links\n"
        f"per node {each.memory_mb:.1f} MB, {each.cores * 1000:.1f} millicores, as a "
        f"node of a lab on {p.placement} (costs measured {p.costs.measured})\n"
        f"host {host.cores:g} cores / {host.memory_mb / 1024:g} GB, "
        f"{host.headroom:.0%} planned: {p.nodes_per_host} nodes a host ({p.bound} binds)\n"
        f"hosts needed: {p.hosts}; each about {p.per_host.memory_mb / 1024:.1f} GB and "
        f"{p.per_host.cores:.1f} cores, its base included")
