"""`nestednet capture`: pcapng from the host side of iPHY ports (nestednet.api.capture)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import click

from nestednet.api.capture import capture as capture_ports
from nestednet.console import FiniteFloat, err_console, out_console, print_json


def register(group: click.Group) -> None:
    group.add_command(capture)


@click.command()
@click.argument("ports", nargs=-1, metavar="NODE:iphyN...")
@click.option("--lab", default="nn", show_default=True, help="Lab to capture in.")
@click.option("-w", "--write", "path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="pcapng file (default: capture-LAB-TIME.pcapng here).")
@click.option("--for", "seconds", type=FiniteFloat(min=0, min_open=True), default=None,
              metavar="S", help="Stop after S seconds (default: at Ctrl-C).")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def capture(ports: tuple[str, ...], lab: str, path: Path | None, seconds: float | None,
            as_json: bool) -> None:
    """Capture packets of iPHY ports into one pcapng file, from the host side of each
    port: nothing is installed or run in the node.

    Each port gets its own interface block, named NODE:iphyN. While `nestednet run`
    plays on the lab, every packet carries its scenario time in a packet comment
    (scenario_time=S); timestamps stay wall-clock. Open the file with Wireshark,
    tshark or scapy.

    \b
    Examples:
      nestednet capture n1:iphy1 --for 10 -w n1.pcapng
      nestednet capture --lab demo n1:iphy1 n2:iphy1 n3:iphy2 -w many.pcapng
    """
    out = path or Path(f"capture-{lab}-{time.strftime('%Y%m%d-%H%M%S')}.pcapng")
    stop = threading.Event()
    if not as_json:
        err_console.print(f"capturing {' '.join(ports)} into {out}"
                          + (f" for {seconds:g} s" if seconds else " (Ctrl-C stops)"))
    try:
        result = capture_ports(lab, ports, out, seconds, stop)
    except KeyboardInterrupt:
        stop.set()
        raise
    if as_json:
        print_json(result)
        return
    stamp = "; scenario time in packet comments" if result["scenario_time"] else ""
    out_console.print(f"{result['packets']} packets in {result['file']}{stamp}",
                      highlight=False, soft_wrap=True)
