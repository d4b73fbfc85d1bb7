"""`nestednet bench`: parse, run nestednet.bench, print where the results are."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nestednet.console import out_console, print_json, progress
from nestednet.errors import ExitStatus

EXPERIMENT_NAMES = ("memory", "links", "stress", "scaling", "startup", "fidelity", "routing",
                    "all")


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
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON too.")
def bench(experiment: str, quick: bool, out: Path | None, seed: int, nodes: tuple[int, ...],
          repeats: int | None, as_json: bool) -> None:
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

    Each writes NAME.json, NAME.png and NAME.md into --out. Labs are created under
    names starting with `b` and deleted afterwards. Needs root, like `create`.

    \b
    Examples:
      nestednet bench all --quick --out results/quick
      nestednet bench startup --nodes 12,48,120 --out results/scale
    """
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
