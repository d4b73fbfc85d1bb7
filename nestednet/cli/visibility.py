"""`nestednet visibility generate|check`: make and validate scenario files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from nestednet.console import out_console, print_json, progress
from nestednet.errors import UsageError
from nestednet.model import visibility as mobility
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.scenario import DEFAULT_IPHYS, LENGTH_UNITS, MAX_IPHYS, summary
from nestednet.model.scenario_file import (
    FORMATS,
    load_link_model,
    load_scenario,
    write_scenario,
)

IPHYS_OPTION_HELP = ("iPHYs per node for NestedNet-format files, which carry no count "
                     f"(default {DEFAULT_IPHYS}); native files set their own.")
LINK_MODEL_OPTION_HELP = ("A link-model file ({\"model\": NAME, \"params\": {...}}, schema "
                          "scenarios/link-model.schema.json); replaces the scenario's own "
                          "link_model for links without explicit values.")
LENGTH_UNIT_OPTION_HELP = ("Unit of the positions, for files that do not state it (the "
                           "NestedNet format never does); distance-based link models need it.")


def register(group: click.Group) -> None:
    group.add_command(visibility)


@click.group()
def visibility() -> None:
    """Scenario files: which nodes see each other, over time.

    \b
    Two formats are read: the native one (JSON Schema: scenarios/scenario.schema.json)
    and the NestedNet visibility format of the thesis (a top-level "MobilecomScnDef").
    See scenarios/README.md.

    \b
      nestednet visibility generate --nodes 12 --model orbit -o my.json
      nestednet visibility check my.json
    """


@visibility.command()
@click.option("--nodes", type=click.IntRange(min=1), required=True, help="Number of nodes.")
@click.option("--duration", type=float, default=60.0, show_default=True,
              help="Scenario length, seconds.")
@click.option("--step", type=float, default=6.0, show_default=True,
              help="Seconds between visibility snapshots (steps at 0, S, 2S, ... < duration).")
@click.option("--range", "range_", type=float, default=100.0, show_default=True,
              help="Line-of-sight range: nodes see each other at distance <= range.")
@click.option("--model", type=click.Choice(mobility.MODELS), default="random-waypoint",
              show_default=True, help="How nodes move.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Random seed: the same seed gives the same file.")
@click.option("--iphys", type=click.IntRange(1, MAX_IPHYS), default=DEFAULT_IPHYS,
              show_default=True, help="iPHYs per node (native format only; the NestedNet "
                                      "format has no field for it).")
@click.option("--area", type=float, default=None,
              help="Side of the square area, same unit as --range (default: sized so a node "
                   "sees about 3 others).")
@click.option("--altitude", type=float, default=None,
              help="With --model orbit: a satellite shell at this height above the Earth "
                   "(in --length-unit), instead of circles in the area.")
@click.option("--planes", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --altitude: orbital planes of the shell (nodes spread evenly).")
@click.option("--length-unit", type=click.Choice(sorted(LENGTH_UNITS)), default=None,
              help="Unit of positions, --range, --area and --altitude, written into the "
                   "file (native format); distance-based link models need it.")
@click.option("--link-model", "link_model", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="A link-model file to write into the scenario as its "
                                 "link_model (native format).")
@click.option("--name", default="", help="Scenario name (default: model-NxM-seedX).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="native",
              show_default=True, help="File format to write.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="File to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def generate(nodes: int, duration: float, step: float, range_: float, model: str, seed: int,
             iphys: int, area: float | None, altitude: float | None, planes: int,
             length_unit: str | None, link_model: Path | None, name: str, fmt: str,
             output: Path, as_json: bool) -> None:
    """Generate node positions over time and write them as a scenario.

    Deterministic: the same options and --seed always give the same file.
    Visibility is derived with the same rule the parser applies (distance <= range).

    \b
      nestednet visibility generate --nodes 20 --model orbit --altitude 550 \\
          --planes 2 --range 5000 --length-unit km --duration 600 --step 60 \\
          --link-model scenarios/models/laser-isl.json -o leo.json
    """
    if fmt != "native" and (length_unit or link_model):
        raise UsageError("--length-unit and --link-model are written into native files only; "
                         "the NestedNet format has no field for them")
    scenario = mobility.generate(
        nodes=nodes, duration=duration, step=step, range_=range_, model=model, seed=seed,
        iphys=iphys, area=area, name=name, length_unit=length_unit,
        link_model=load_link_model(link_model) if link_model is not None else None,
        shell=mobility.Shell(altitude, planes) if altitude is not None else None)
    write_scenario(scenario, output, fmt)
    progress(f"wrote {output} ({fmt} format)")
    _print_summary(summary(scenario) | {"format": fmt}, str(output), as_json, verb="wrote")


@visibility.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--iphys", type=click.IntRange(1, MAX_IPHYS), default=DEFAULT_IPHYS,
              show_default=True, help=IPHYS_OPTION_HELP)
@click.option("--link-model", "link_model", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help=LINK_MODEL_OPTION_HELP)
@click.option("--length-unit", type=click.Choice(sorted(LENGTH_UNITS)), default=None,
              help=LENGTH_UNIT_OPTION_HELP)
@click.option("--pairs", is_flag=True, help="List the visible pairs of every step.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def check(file: Path, iphys: int, link_model: Path | None, length_unit: str | None,
          pairs: bool, as_json: bool) -> None:
    """Validate a scenario file (either format) and summarise it.

    Exit status 0 when valid; 2 with every problem and its place in the file
    (e.g. `steps[3].visible[2]: unknown node 'n13'`) when not. When links are
    shaped (explicit values or a link model), each step also shows the
    min/median/max one-way delay and rate over its link directions.

    \b
      nestednet visibility check scenarios/uav-swarm-2g4.json
      nestednet visibility check scenarios/nestednet-format-example.json \\
          --length-unit m --link-model scenarios/models/wifi-2g4.json
    """
    scenario = load_scenario(file, nestednet_iphys=iphys, length_unit=length_unit)
    override = load_link_model(link_model) if link_model is not None else None
    resolver = LinkResolver(scenario, override, source=str(file))
    data = summary(scenario)
    if override is not None:
        data["link_model"] = override.document()
    if resolver.model is not None or any(s.links for s in scenario.steps):
        for step, links in zip(data["steps"], resolver.summary(), strict=True):
            step["links"] = {k: v for k, v in links.items() if k not in ("index", "time")}
    _print_summary(data, str(file), as_json, pairs=pairs)


def _print_summary(data: dict[str, Any], source: str, as_json: bool, *, pairs: bool = False,
                   verb: str = "valid") -> None:
    if as_json:
        print_json({"file": source, **data})
        return
    iphys = sorted({n["iphys"] for n in data["nodes"]})
    shape = f"{len(data['nodes'])} nodes × {'/'.join(map(str, iphys))} iPHYs"
    los = data["line_of_sight"]
    unit = f" {data['length_unit']}" if data.get("length_unit") else ""
    rule = f", line of sight: distance <= {los['range']:g}{unit}" if los else ""
    model = data.get("link_model")
    rule += f", link model: {model['model']}" if model else ""
    label = f" {data['name']!r}" if data["name"] else ""
    out_console.print(f"{source}: {verb} {data['format']} scenario{label}: {shape}, "
                      f"{len(data['steps'])} steps over {data['duration']:g} s{rule}",
                      soft_wrap=True, markup=False)
    table = Table(box=None, header_style="bold")
    for col, justify in (("step", "right"), ("from s", "right"), ("to s", "right"),
                         ("visible", "right"), ("+", "right"), ("-", "right"),
                         ("isolated", "left")):
        table.add_column(col, justify=justify)
    if pairs:
        table.add_column("pairs")
    for s in data["steps"]:
        row = [str(s["index"]), f"{s['time']:g}", f"{s['until']:g}", str(s["visible_pairs"]),
               str(s["appeared"]), str(s["lost"]), " ".join(s["isolated"]) or "-"]
        if pairs:
            row.append(" ".join(f"{a}-{b}" for a, b in s["visible"]) or "-")
        table.add_row(*row)
    out_console.print(table)
    if any("links" in s for s in data["steps"]):
        out_console.print(_links_table(data["steps"]))


def _links_table(steps: list[dict[str, Any]]) -> Table:
    """Per step, over every direction of every visible link: delay, rate, loss."""
    table = Table(box=None, header_style="bold", title="link properties per step (one-way)",
                  title_justify="left")
    table.add_column("step", justify="right")
    for col in ("delay ms min", "med", "max", "rate Mbit/s min", "med", "max", "loss % max",
                "unshaped", "no link"):
        table.add_column(col, justify="right")
    for s in steps:
        links = s["links"]
        loss = links["max_loss_pct"]
        table.add_row(str(s["index"]), *_spread(links["delay_us"], 1e3),
                      *_spread(links["rate_bps"], 1e6), "-" if loss is None else f"{loss:.3g}",
                      str(links["unshaped"]), str(links["no_link"]))
    return table


def _spread(spread: dict[str, float] | None, per_unit: float) -> list[str]:
    """Min, median, max in the column's unit; "-" when no link direction has a value."""
    if spread is None:
        return ["-"] * 3
    return [f"{spread[k] / per_unit:.4g}" for k in ("min", "median", "max")]
