"""`nestednet demo`: the default demo that `make demo` runs."""

from __future__ import annotations

from pathlib import Path

import click

from nestednet.api.run import RunRequest
from nestednet.cli.run import execute
from nestednet.console import FiniteFloat

DEMO_SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "demo-12x4.json"


def register(group: click.Group) -> None:
    group.add_command(demo)


@click.command()
@click.option("--lab", default="demo", show_default=True, help="Name of the demo lab.")
@click.option("--speed", type=FiniteFloat(min=0, min_open=True), default=2.0,
              show_default=True, help="Scenario seconds per wall-clock second.")
@click.option("--keep", is_flag=True, help="Keep the lab afterwards (default: delete it).")
def demo(lab: str, speed: float, keep: bool) -> None:
    """Run the default demo: a 12-node x 4-iPHY MANET scenario, end to end.

    Creates the lab, lets the CA and the GNAB agents negotiate links while the
    nodes move (scenarios/demo-12x4.json), prints a summary, and deletes the lab
    unless --keep is given. The run's directory, with its events, is kept either way
    (the last line names it; `nestednet report` takes it).
    """
    if not DEMO_SCENARIO.exists():
        raise click.UsageError(f"demo scenario {DEMO_SCENARIO} not found (a source checkout is "
                               "needed)")
    execute(RunRequest(scenario=DEMO_SCENARIO, lab=lab, speed=speed, remove_lab=not keep,
                       hello_timeout=120), as_json=False)
