"""`nestednet visibility generate|check`: make and validate scenario files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from nestednet.console import out_console, print_json, progress
from nestednet.errors import UsageError
from nestednet.model import visibility as mobility
from nestednet.model.limits import MAX_NODES as MAX_SCENARIO_NODES
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.scenario import (
    DEFAULT_IPHYS,
    LENGTH_UNITS,
    LINK_CLASSES,
    MAX_IPHYS,
    parse_start_time,
    summary,
)
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


ORBIT_ONLY = ("tle", "walker", "start", "ground_stations", "isl", "isl_range_km",
              "atmosphere_km", "write_tle", "link_classes")
SYNTHETIC_ONLY = ("nodes", "range_", "model", "seed", "area", "altitude", "planes")


@visibility.command()
@click.option("--nodes", type=click.IntRange(min=1), default=None,
              help="Number of nodes (synthetic models; not with --tle/--walker).")
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
@click.option("--tle", "tle", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Real orbits: a TLE file (2 or 3 lines per object; name lines become "
                   "node names, else s<catalogue number>). May repeat.")
@click.option("--walker", multiple=True, metavar="ALT_KM:INC_DEG:PLANES:SATS_PER_PLANE:PHASE",
              help="Real orbits: a Walker-delta shell (e.g. 550:53:72:22:1, Starlink shell "
                   "1). May repeat; satellites are named w<shell>p<plane>s<slot>.")
@click.option("--start", default=None, metavar="ISO8601",
              help="With --tle/--walker (required): wall-clock time of step 0, with a zone, "
                   "e.g. 2026-11-26T00:00:00Z; Walker TLEs take it as their epoch.")
@click.option("--ground-stations", "ground_stations", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Ground stations JSON (schema nestednet/schemas/"
                   "ground-stations.schema.json): name, lat, lon, alt_m, min_elevation_deg "
                   "(default 25), policy all|nearest|highest.")
@click.option("--isl", type=click.Choice(("grid", "los", "none")), default=None,
              help="Inter-satellite visibility: grid (+Grid of Walker shells, while clear "
                   "of the Earth and --atmosphere-km; the default with --walker only), los "
                   "(within --isl-range-km, clear of the Earth and --atmosphere-km), none "
                   "(the default with --tle).")
@click.option("--isl-range-km", "isl_range_km", type=float, default=None,
              help="With --isl los: the longest inter-satellite link, km.")
@click.option("--atmosphere-km", "atmosphere_km", type=float, default=80.0,
              show_default=True, help="With --isl grid|los: how high above the Earth an "
                                      "inter-satellite sight line must stay (Hypatia's 80 km).")
@click.option("--write-tle", "write_tle", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also write the satellites' TLEs (3 lines each, checksums "
                                 "included) to this file: the Walker shells for other tools.")
@click.option("--link-class", "link_classes", multiple=True, metavar="CLASS=MODEL.json",
              help="A link model for one class of pair (isl, gsl or default), written into "
                   "the scenario's link_classes; wins over --link-model for its pairs.")
@click.option("--name", default="", help="Scenario name (default: model-NxM-seedX).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="native",
              show_default=True, help="File format to write.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="File to write.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_context
def generate(ctx: click.Context, nodes: int | None, duration: float, step: float,
             range_: float, model: str, seed: int, iphys: int, area: float | None,
             altitude: float | None, planes: int, length_unit: str | None,
             link_model: Path | None, tle: tuple[Path, ...], walker: tuple[str, ...],
             start: str | None, ground_stations: Path | None, isl: str | None,
             isl_range_km: float | None, atmosphere_km: float, write_tle: Path | None,
             link_classes: tuple[str, ...], name: str, fmt: str, output: Path,
             as_json: bool) -> None:
    """Generate node positions over time and write them as a scenario.

    Synthetic models (--nodes, --model): deterministic for a --seed; visibility
    follows the parser's rule (distance <= range).

    Real orbits (--tle and/or --walker, with --start): SGP4 propagation, positions
    in ITRS (Earth-fixed) km for every node at every step, ground stations seeing
    satellites above their elevation mask, explicit visible pairs. Nothing is
    downloaded. Bad TLEs, times or stations: exit 2, nothing written.

    \b
      nestednet visibility generate --nodes 20 --model orbit --altitude 550 \\
          --planes 2 --range 5000 --length-unit km --duration 600 --step 60 \\
          --link-model scenarios/models/laser-isl.json -o leo.json
      nestednet visibility generate --walker 550:53:6:11:1 \\
          --start 2026-11-26T00:00:00Z --duration 600 --step 10 \\
          --ground-stations scenarios/stations/gs4.json --iphys 5 -o leo66.json
      nestednet visibility generate --tle starlink.tle --isl los --isl-range-km 5000 \\
          --start 2026-11-26T12:00:00+01:00 --duration 60 --step 1 -o real.json
    """
    given = {k for k in ctx.params
             if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT}
    if tle or walker:
        clash = sorted(given & set(SYNTHETIC_ONLY))
        if clash:
            raise UsageError(f"--{clash[0].rstrip('_').replace('_', '-')} is for synthetic "
                             "models; --tle/--walker place the nodes themselves")
        if fmt != "native":
            raise UsageError("real orbits are written in the native format only")
        if length_unit not in (None, "km"):
            raise UsageError("real orbits are written in km (--length-unit km)")
        _generate_orbits(tle=tle, walker=walker, start=start, ground_stations=ground_stations,
                         isl=isl, isl_range_km=isl_range_km, atmosphere_km=atmosphere_km,
                         write_tle=write_tle, link_classes=link_classes, duration=duration,
                         step=step, iphys=iphys, link_model=link_model, name=name,
                         output=output, as_json=as_json)
        return
    clash = sorted(given & set(ORBIT_ONLY))
    if clash:
        raise UsageError(f"--{clash[0].replace('_', '-')} needs --tle or --walker")
    if nodes is None:
        raise UsageError("give --nodes N (a synthetic model) or --tle/--walker (real orbits)")
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


def _generate_orbits(*, tle: tuple[Path, ...], walker: tuple[str, ...], start: str | None,
                     ground_stations: Path | None, isl: str | None, isl_range_km: float | None,
                     atmosphere_km: float, write_tle: Path | None,
                     link_classes: tuple[str, ...], duration: float, step: float, iphys: int,
                     link_model: Path | None, name: str, output: Path, as_json: bool) -> None:
    # Lazy: sgp4, skyfield and numpy load only for real orbits, keeping the CLI quick
    from nestednet.orbits import constellation, stations
    from nestednet.orbits import tle as tles
    from nestednet.orbits import walker as walkers

    if start is None:
        raise UsageError("--start is required with --tle/--walker: the wall-clock time of "
                         "step 0, with a zone (e.g. 2026-11-26T00:00:00Z)")
    try:
        when = parse_start_time(start)
    except ValueError as exc:
        message = str(exc) if "zone" in str(exc) else f"not an ISO 8601 time: {start!r}"
        raise UsageError(f"--start: {message}") from None
    mobility.check_times(duration, step)
    shells = [walkers.parse_walker(w) for w in walker]
    if sum(shell.size for shell in shells) > MAX_SCENARIO_NODES:
        raise UsageError(f"--walker: {sum(shell.size for shell in shells)} satellites, more "
                         f"than the {MAX_SCENARIO_NODES} nodes a scenario may have")
    satellites = []
    for k, shell in enumerate(shells, start=1):
        satellites += walkers.shell_tles(shell, k, when, len(satellites) + 1)
    for path in tle:
        satellites += tles.read_tle_file(path)
    gs = stations.load_ground_stations(ground_stations) if ground_stations else []
    classes = {}
    for item in link_classes:
        cls, sep, file = item.partition("=")
        if not sep or cls not in LINK_CLASSES:
            raise UsageError(f"--link-class {item!r}: expected CLASS=MODEL.json with CLASS "
                             f"one of {', '.join(LINK_CLASSES)}")
        classes[cls] = load_link_model(file)
    options = constellation.Options(
        start=when, duration=duration, step=step,
        isl=isl or ("grid" if not tle else "none"), isl_range_km=isl_range_km,
        atmosphere_km=atmosphere_km, iphys=iphys, name=name,
        link_model=load_link_model(link_model) if link_model is not None else None,
        link_classes=classes)
    scenario = constellation.build(
        constellation.Constellation(satellites=satellites, stations=gs, shells=shells,
                                    only_walker=not tle), options)
    if write_tle is not None:
        count = tles.write_tle_file(((s.name, s.satrec()) for s in satellites), write_tle)
        progress(f"wrote {write_tle} ({count} TLEs)")
    write_scenario(scenario, output, "native")
    progress(f"wrote {output} (native format, {len(satellites)} satellites, "
             f"{len(gs)} ground stations)")
    _print_summary(summary(scenario) | {"format": "native"}, str(output), as_json,
                   verb="wrote")


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
    shaped (explicit values, a link model or link_classes), each step also shows
    the min/median/max one-way delay and rate over its link directions. With
    --json every step lists its visible pairs with their link class (isl, gsl,
    default), distance and, per direction, delay (us), rate (bit/s) and source.

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
    if resolver.has_models or any(s.links for s in scenario.steps):
        for step, links in zip(data["steps"], resolver.summary(), strict=True):
            step["links"] = {k: v for k, v in links.items() if k not in ("index", "time")}
    if as_json:
        for i, step in enumerate(data["steps"]):
            step["pairs"] = resolver.pair_details(i)
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
