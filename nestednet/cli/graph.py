"""`nestednet graph`: draw who sees whom and which links are up (PNG or GIF)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from nestednet import connectivity_plot as plot
from nestednet.cli.visibility import LENGTH_UNIT_OPTION_HELP, LINK_MODEL_OPTION_HELP
from nestednet.console import print_json, progress
from nestednet.errors import UsageError
from nestednet.model import events as ev
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.scenario import DEFAULT_IPHYS, LENGTH_UNITS, MAX_IPHYS, Scenario
from nestednet.model.scenario_file import (
    decode_json,
    load_link_model,
    load_scenario,
    parse_scenario,
    with_length_unit,
)


def register(group: click.Group) -> None:
    group.add_command(graph)


@click.command()
@click.argument("source", metavar="SCENARIO_OR_EVENTS", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="OUT.png (one step) or OUT.gif (every step, animated).")
@click.option("--at", "at", type=float, default=None,
              help="Scenario time to draw (PNG): the step in effect then. Default: first step.")
@click.option("--events", "events_file", type=click.Path(path_type=Path), default=None,
              help="Events file of a run, to draw links over a scenario.")
@click.option("--scenario", "scenario_file", type=click.Path(path_type=Path), default=None,
              help="Scenario file, to give positions when SCENARIO_OR_EVENTS is an events file.")
@click.option("--iphys", type=click.IntRange(1, MAX_IPHYS), default=DEFAULT_IPHYS,
              show_default=True, help="iPHYs per node for NestedNet-format scenarios.")
@click.option("--label", type=click.Choice(plot.LABEL_KINDS), default=None,
              help="Colour and label every visible pair by its link's one-way delay (ms) or "
                   "rate (Mbit/s): explicit values, else the link model.")
@click.option("--link-model", "link_model", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help=LINK_MODEL_OPTION_HELP)
@click.option("--length-unit", type=click.Choice(sorted(LENGTH_UNITS)), default=None,
              help=LENGTH_UNIT_OPTION_HELP)
@click.option("--path", "path", nargs=2, metavar="A B", default=None,
              help="Highlight a fewest-hops path from node A to node B over the links "
                   "(needs a run's events).")
@click.option("--map", "map_view", is_flag=True,
              help="Orbital scenarios (frame ITRS, km): a longitude/latitude map instead of "
                   "the globe.")
@click.option("--json", "as_json", is_flag=True, help="Print what was drawn as JSON.")
def graph(source: Path, output: Path, at: float | None, events_file: Path | None,
          scenario_file: Path | None, iphys: int, label: str | None, link_model: Path | None,
          length_unit: str | None, map_view: bool, as_json: bool,
          path: tuple[str, str] | None = None) -> None:
    """Draw the 3-D connectivity picture: nodes, visible pairs (faint), links (bold).

    SCENARIO_OR_EVENTS is a scenario file (either format) or the events file
    (JSON lines) of a run. Links are drawn only when events are given, as they
    stand once each step has settled. Scenarios without positions are drawn on
    a circle. Orbital scenarios (positions in ITRS km, as `visibility generate
    --tle/--walker` writes them) are drawn on the Earth, or on a map with --map:
    satellites as dots, ground stations as triangles, pairs coloured by link
    class (isl blue, gsl orange, default grey).

    \b
      nestednet graph scenarios/demo-12x4.json --at 30 -o demo.png
      nestednet graph scenarios/demo-12x4.json --events run/events.jsonl -o run.gif
      nestednet graph scenarios/leo-laser-20.json --label delay -o leo.png
      nestednet graph run/events.jsonl --scenario s.json --path n1 n5 -o path.png
      nestednet graph scenarios/leo-walker-66-gs4.json --map --at 300 -o leo-map.png
    """
    kind = output.suffix.lower()
    if kind not in (".png", ".gif"):
        raise UsageError(f"{output}: the output must end in .png or .gif")
    if kind == ".gif" and at is not None:
        raise UsageError("--at picks one step for a PNG; a GIF shows every step",
                         hint="drop --at, or write OUT.png")

    scenario, events = _read_inputs(source, events_file, scenario_file, iphys)
    if scenario is not None:
        scenario = with_length_unit(scenario, length_unit, str(scenario_file or source))
        resolver = None
        if label:
            override = load_link_model(link_model) if link_model is not None else None
            resolver = LinkResolver(scenario, override, source=str(scenario_file or source))
        frames = plot.frames_from_scenario(scenario, events, resolver=resolver,
                                           label=label or "")
    else:
        if label:
            raise UsageError("--label needs a scenario: link properties come from it",
                             hint="add --scenario FILE")
        assert events is not None
        frames = plot.frames_from_events(events, title=source.stem)

    if map_view and not frames[0].earth:
        raise UsageError("--map draws orbital scenarios: positions in the ITRS frame, km",
                         hint="make one with nestednet visibility generate --walker/--tle")
    if path:
        if frames[0].links is None:
            raise UsageError("--path follows links, which only a run's events give",
                             hint="add --events EVENTS.jsonl")
        unknown = [n for n in path if n not in frames[0].positions]
        if unknown:
            raise UsageError(f"--path: no node {unknown[0]!r}",
                             hint=f"nodes: {', '.join(sorted(frames[0].positions)[:12])}")
        frames = [plot.with_path(frame, *path) for frame in frames]
    if kind == ".png":
        frame = plot.frame_at(frames, at) if at is not None else frames[0]
        plot.render_png(frame, output, map_view=map_view)
        drawn = [frame]
    else:
        plot.render_gif(frames, output, map_view=map_view)
        drawn = list(frames)
    if as_json:
        print_json({"output": str(output), "frames": [
            {"step": f.index, "time": f.time, "visible_pairs": len(f.visible),
             "links": None if f.links is None else len(f.links),
             **({"path": None if f.path[1] is None else list(f.path[1])} if f.path else {})}
            for f in drawn]})
    else:
        progress(f"wrote {output} ({len(drawn)} step{'s' if len(drawn) != 1 else ''})")


def _read_inputs(source: Path, events_file: Path | None, scenario_file: Path | None,
                 iphys: int) -> tuple[Scenario | None, list[ev.Event] | None]:
    """(scenario or None, events or None) from the positional file and the options."""
    text = _read_text(source)
    if not _looks_like_events(text):
        if scenario_file is not None:
            raise UsageError("--scenario is for an events file; SCENARIO_OR_EVENTS is "
                             "already a scenario")
        scenario = parse_scenario(decode_json(text, str(source)), str(source),
                                  nestednet_iphys=iphys)
        events = ev.read_events(events_file) if events_file is not None else None
        return scenario, events
    if events_file is not None:
        raise UsageError("--events is for a scenario; SCENARIO_OR_EVENTS is already an "
                         "events file", hint="use --scenario to add positions")
    events = ev.parse_events(text, str(source))
    scenario = None
    if scenario_file is not None:
        scenario = load_scenario(scenario_file, nestednet_iphys=iphys)
    return scenario, events


def _looks_like_events(text: str) -> bool:
    """JSON lines whose first record has an "event" field (a scenario is one JSON document)."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and "event" in record


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None
