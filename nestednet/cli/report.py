"""`nestednet report`: one page per run from its events (nestednet.report)."""

from __future__ import annotations

from pathlib import Path

import click

from nestednet.console import out_console, print_json


def register(group: click.Group) -> None:
    group.add_command(report)


@click.command()
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="report.html (one file, images embedded) or report.md "
                                 "(images in REPORT-files/). Default: RUN_DIR/report.html.")
@click.option("--json", "as_json", is_flag=True, help="Print the files written as JSON.")
def report(run_dir: Path, output: Path | None, as_json: bool) -> None:
    """Write the report of one run: steps, links and faults over time, route changes,
    each measurement with step and fault markers, fidelity, negotiation.

    RUN_DIR is the directory `nestednet run` prints last (or its events file).

    \b
    Examples:
      nestednet report ~/.local/share/nestednet/runs/nn/20261126-153000
      nestednet report RUN_DIR -o report.md
    """
    # Lazy: matplotlib is slow to import, and only this command draws.
    from nestednet.report import render

    events = render.events_path(run_dir)
    out = output or events.parent / "report.html"
    written = render.write(render.build(run_dir), out)
    if as_json:
        print_json({"report": str(out), "files": [str(p) for p in written]})
        return
    out_console.print(f"report in {out}", highlight=False, soft_wrap=True)
