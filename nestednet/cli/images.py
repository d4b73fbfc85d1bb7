"""`nestednet images build|list`."""

from __future__ import annotations

import click
from rich.table import Table

from nestednet.console import out_console, print_json, progress


def register(group: click.Group) -> None:
    group.add_command(images)


@click.group()
def images() -> None:
    """Build and list the node-parent and component images."""


@images.command()
@click.option("--base-image", metavar="REF",
              help="Base image to build on (default: debian:bookworm-slim if present or "
                   "pullable, else one made here with debootstrap).")
@click.option("--force", is_flag=True, help="Rebuild even when the inputs are unchanged.")
@click.option("-v", "--verbose", is_flag=True, help="Show every build log line.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def build(base_image: str | None, force: bool, verbose: bool, as_json: bool) -> None:
    """Build the images; works with no registry. Cached: unchanged inputs are skipped."""
    # Lazy: the docker SDK would add start-up time to every command.
    from nestednet import images as image_builder

    results = image_builder.build_all(base_image=base_image, force=force, verbose=verbose,
                                      report=progress)
    if as_json:
        print_json([r.__dict__ for r in results])
        return
    for r in results:
        state = "cached" if r.cached else "built"
        out_console.print(f"{r.tag}  {r.image_id}  {r.size_mb:.0f} MB  ({state})")


@images.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def list_(as_json: bool) -> None:
    """Show which NestedNet images are present, with size."""
    # Lazy: the docker SDK would add start-up time to every command.
    from nestednet import images as image_builder

    rows = image_builder.list_images()
    if as_json:
        print_json(rows)
        return
    table = Table(box=None, header_style="bold")
    for col in ("image", "present", "id", "size", "created"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["tag"], "yes" if r["present"] else "no", r.get("id", ""),
                      f"{r['size_mb']} MB" if r["present"] else "", r.get("created", ""))
    out_console.print(table)
