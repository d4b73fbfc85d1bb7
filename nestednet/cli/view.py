"""`nestednet view`: the lab and its run in a browser, as they happen (read-only)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from nestednet.cli.visibility import LENGTH_UNIT_OPTION_HELP, LINK_MODEL_OPTION_HELP
from nestednet.console import out_console, print_json
from nestednet.errors import UsageError
from nestednet.model.scenario import DEFAULT_IPHYS, LENGTH_UNITS, MAX_IPHYS
from nestednet.model.scenario_file import load_link_model, load_scenario
from nestednet.model.topology import DEFAULT_LAB


def register(group: click.Group) -> None:
    group.add_command(view)


@click.command()
@click.argument("target", metavar="[RUN_DIR | EVENTS | SCENARIO]", required=False,
                type=click.Path(path_type=Path))
@click.option("--lab", default=None, metavar="NAME",
              help=f"Watch this lab and the run playing on it (default: {DEFAULT_LAB}, when "
                   "no RUN_DIR or SCENARIO is given).")
@click.option("--scenario", "scenario_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="The scenario a lab or run plays: gives node positions "
                                 "(runs record none).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="TCP port (0: any free one; the URL printed says which).")
@click.option("--bind", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback needs --token.")
@click.option("--token", envvar="NESTEDNET_VIEW_TOKEN", default=None,
              help="Secret every request must carry (at least 16 characters; also "
                   "$NESTEDNET_VIEW_TOKEN). Needed with a non-loopback --bind.")
@click.option("--iphys", type=click.IntRange(1, MAX_IPHYS), default=DEFAULT_IPHYS,
              show_default=True, help="iPHYs per node for NestedNet-format scenarios.")
@click.option("--length-unit", type=click.Choice(sorted(LENGTH_UNITS)), default=None,
              help=LENGTH_UNIT_OPTION_HELP)
@click.option("--link-model", "link_model", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help=LINK_MODEL_OPTION_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="Print the URL and what is shown as JSON, then serve.")
def view(target: Path | None, lab: str | None, scenario_file: Path | None, port: int,
         bind: str, token: str | None, iphys: int, length_unit: str | None,
         link_model: Path | None, as_json: bool) -> None:
    """Serve a live page of a lab, a run or a scenario; Ctrl-C stops it.

    The page draws the nodes in 3-D (on a globe when positions are Earth-centred),
    the links coloured by class, delay or rate as the run's events arrive, an
    events feed, the run's figures per step and, for a run, a slider to replay it
    step by step. A click on a node shows its components, addresses, routes and
    links; a click on a link its configured and measured properties. The page only
    reads: it changes nothing in the lab.

    \b
    Safe by default: it listens on 127.0.0.1. Any other --bind needs --token, and
    then every request must carry it (the printed URL does, once).

    \b
      nestednet view --lab nn                       the lab, and any run on it
      nestednet view --lab nn --scenario s.json     ... with the scenario's positions
      nestednet view /var/lib/nestednet/runs/nn-20260101-120000   replay a run
      nestednet view scenarios/leo-laser-20.json    a scenario, step by step
      nestednet view --lab nn --bind 0.0.0.0 --token "$(openssl rand -hex 16)"
    """
    # Lazy: the web stack (starlette, uvicorn) loads only for this command.
    from nestednet.view import access, server, source

    access.check_bind(bind, token)
    if target is not None and lab is not None:
        raise UsageError("give either --lab NAME or a RUN_DIR/SCENARIO, not both")
    scenario = None
    if scenario_file is not None:
        if target is not None and _kind(target) == "scenario":
            raise UsageError("--scenario is for a lab or a run; the argument is a scenario "
                             "already")
        scenario = load_scenario(scenario_file, nestednet_iphys=iphys, length_unit=length_unit)
    if target is None:
        shown: source.Source = source.LabSource(lab or DEFAULT_LAB, scenario)
    elif _kind(target) == "run":
        shown = source.RunDirSource(target, scenario)
    else:
        model = load_link_model(link_model) if link_model is not None else None
        shown = source.ScenarioSource(target, iphys=iphys, length_unit=length_unit,
                                      link_model=model)
    sock = server.listen(bind, port)
    address = server.url(sock, bind, token)
    if as_json:
        print_json({"url": address, "kind": shown.kind, "title": shown.title,
                    "port": sock.getsockname()[1]})
    else:
        out_console.print(f"view of {shown.kind} {shown.title}: {address}  (Ctrl-C stops it)",
                          highlight=False, soft_wrap=True)
    sys.stdout.flush()
    try:
        server.serve(shown, sock, bind=bind, token=token)
    finally:
        shown.close()


def _kind(target: Path) -> str:
    """"run" for a run directory or events file, "scenario" for a scenario file."""
    if target.is_dir():
        return "run"
    try:
        with target.open(encoding="utf-8") as f:
            first = next((line for line in f if line.strip()), "")
    except FileNotFoundError:
        raise UsageError(f"{target}: no such file or directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{target}: cannot read: {exc}") from None
    try:
        record = json.loads(first)
    except ValueError:
        return "scenario"
    return "run" if isinstance(record, dict) and "event" in record else "scenario"
