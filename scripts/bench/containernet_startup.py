#!/usr/bin/env python3
"""Create time side by side: the real Containernet, NestedNet nested and NestedNet flat.

Containernet has no PyPI release, so this takes a source checkout (CONTAINERNET_DIR,
e.g. `git archive` of github.com/containernet/containernet) and installs it into a
scratch venv of its own (--venv; made on first use, reused after), never into the
project's environment. The recipe is the one in docs/benchmarks.md: Debian's `mininet`
package for `mnexec`, then a venv with docker==6.0.1, python-iptables,
requests==2.31.0, urllib3==1.26.20 and `pip install --no-build-isolation -e CHECKOUT`.

The Containernet lab is the paper's baseline shape (scripts/bench/containernet_lab.py):
one Docker host per node with 1 + M interfaces on a per-node userspace OVS switch and M
on a shared main switch. NestedNet labs are `nestednet create` of the same size, nested
and flat. For each size the three are alternated (the order rotates every repeat), so a
load swing hits all three alike; the 1-minute load average before each creation and the
machine's busy share during it are printed beside each time. Medians of --repeats.

    .venv/bin/python scripts/bench/containernet_startup.py CONTAINERNET_DIR \\
        [--sizes 2,6,12,48] [--iphys 4] [--repeats 3] [--json]

Exit 2 on a bad checkout or missing `mnexec`; Ctrl-C (130) removes the lab in progress.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from nestednet.errors import Interrupted
from nestednet.lab import create, teardown
from nestednet.lab.record import LabRecord

KINDS = ("containernet", "nested", "flat")
VENV_PACKAGES = ("wheel", "setuptools", "docker==6.0.1", "python-iptables",
                 "requests==2.31.0", "urllib3==1.26.20")
LAB_SCRIPT = Path(__file__).with_name("containernet_lab.py")


class Usage(Exception):
    """Bad input: printed, exit 2."""


def check_checkout(path: Path) -> None:
    net = path / "mininet" / "net.py"
    if not net.is_file() or "class Containernet" not in net.read_text(errors="replace"):
        raise Usage(f"{path}: not a Containernet checkout (no class Containernet in "
                    "mininet/net.py); get one with `git clone "
                    "https://github.com/containernet/containernet`")
    if shutil.which("mnexec") is None:
        raise Usage("mnexec not found: Containernet needs Mininet's helper; "
                    "`apt-get install mininet` provides it")


def ensure_venv(checkout: Path, venv: Path, log) -> Path:
    """The scratch venv's python, with Containernet from ``checkout`` importable."""
    python = venv / "bin" / "python"
    probe = "import mininet, mininet.net; print(mininet.__file__)"
    if python.exists():
        found = subprocess.run([python, "-c", probe], capture_output=True, text=True)
        if found.returncode == 0 and Path(found.stdout.strip()).resolve().is_relative_to(
                checkout.resolve()):
            return python
    log(f"installing Containernet from {checkout} into scratch venv {venv}")
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
    pip = [python, "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *VENV_PACKAGES], check=True)
    subprocess.run([*pip, "--no-build-isolation", "-e", checkout], check=True)
    return python


def busy_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies over all cores, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def run_containernet(python: Path, nodes: int, iphys: int, prefix: str) -> dict:
    out = subprocess.run([python, LAB_SCRIPT, str(nodes), str(iphys), prefix],
                         capture_output=True, text=True)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"containernet lab failed ({out.returncode}): "
                           f"{out.stderr.strip()[-800:]}")
    result = json.loads(lines[-1])
    return {"create_s": result["create_s"], "phases": result["phases"]}


def run_nestednet(kind: str, nodes: int, iphys: int, lab: str) -> dict:
    record = LabRecord(lab)
    if record.exists():
        teardown.delete_lab(record)
    try:
        meta = create.create(create.CreateRequest(lab=lab, nodes=nodes, iphys=iphys,
                                                  design=kind))
    finally:
        if record.exists():
            teardown.delete_lab(LabRecord(lab))
    phases = {k: v["wall_s"] for k, v in meta.get("timings", {}).items()}
    return {"create_s": meta["create_s"], "phases": phases}


def one(kind: str, nodes: int, iphys: int, args, python: Path) -> dict:
    load = os.getloadavg()[0]
    busy0, total0 = busy_jiffies()
    if kind == "containernet":
        result = run_containernet(python, nodes, iphys, args.prefix)
    else:
        result = run_nestednet(kind, nodes, iphys, f"{args.lab}{kind[0]}")
    busy1, total1 = busy_jiffies()
    result["load_1m_before"] = round(load, 2)
    result["machine_busy_pct"] = round(100 * (busy1 - busy0) / max(1, total1 - total0), 1)
    return result


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def measure(args, python: Path, log) -> list[dict]:
    rows = []
    for nodes in args.sizes:
        runs: dict[str, list[dict]] = {k: [] for k in args.kinds}
        for r in range(args.repeats):
            order = args.kinds[r % len(args.kinds):] + args.kinds[:r % len(args.kinds)]
            for kind in order:
                result = one(kind, nodes, args.iphys, args, python)
                runs[kind].append(result)
                log(f"{nodes} x (1+{args.iphys}) {kind}: {result['create_s']:.2f} s "
                    f"(load {result['load_1m_before']}, busy {result['machine_busy_pct']} %)")
        row = {"nodes": nodes, "iphys": args.iphys, "runs": runs,
               "median_s": {k: median([x["create_s"] for x in v]) for k, v in runs.items()},
               "load_1m": {k: [x["load_1m_before"] for x in v] for k, v in runs.items()}}
        cn = row["median_s"].get("containernet")
        row["ratio_to_containernet"] = {k: round(v / cn, 2) for k, v in
                                        row["median_s"].items() if cn and k != "containernet"}
        rows.append(row)
    return rows


def table(rows: list[dict], kinds: list[str]) -> str:
    head = "| nodes × (1+M) | " + " | ".join(f"{k} s (load)" for k in kinds)
    ratios = [k for k in kinds if k != "containernet"] if "containernet" in kinds else []
    head += "".join(f" | {k}/Containernet" for k in ratios) + " |"
    lines = [head, "|" + " --- |" * (1 + len(kinds) + len(ratios))]
    for row in rows:
        cells = [f"{row['median_s'][k]:.2f} ({median(row['load_1m'][k]):.1f})" for k in kinds]
        cells += [f"{row['ratio_to_containernet'][k]:.2f}" for k in ratios]
        lines.append(f"| {row['nodes']} × (1+{row['iphys']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Hold the system lock while it runs: flock /tmp/nestednet-system.lock ...")
    parser.add_argument("checkout", metavar="CONTAINERNET_DIR", type=Path,
                        help="a Containernet source checkout")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/nestednet-containernet-venv"),
                        help="scratch venv for Containernet (made if missing)")
    parser.add_argument("--sizes", default="2,6,12,48", help="node counts, comma-separated")
    parser.add_argument("--iphys", type=int, default=4, help="iPHYs per node (M)")
    parser.add_argument("--repeats", type=int, default=3, help="creations per kind and size")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="which of containernet,nested,flat to run")
    parser.add_argument("--lab", default="cnb", help="NestedNet lab name prefix (letters, up to 6)")
    parser.add_argument("--prefix", default="cnb",
                        help="Containernet name prefix (hosts PREFIXhN, switches PREFIXsN)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(x) for x in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes {args.sizes!r}: expected node counts like 2,6,12")
    args.kinds = [k for k in args.kinds.split(",") if k]
    bad = [k for k in args.kinds if k not in KINDS]
    if bad or not args.kinds:
        parser.error(f"--kinds: unknown {bad}; choose from {','.join(KINDS)}")
    if any(n < 1 for n in args.sizes) or args.iphys < 1 or args.repeats < 1:
        parser.error("--sizes, --iphys and --repeats must be positive")
    if len(args.prefix) > 5 or not args.prefix.isalpha():
        parser.error("--prefix: up to 5 letters (interface names stay within 15 characters)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        python = None
        if "containernet" in args.kinds:
            check_checkout(args.checkout)
            python = ensure_venv(args.checkout, args.venv, log)
        started = time.time()
        rows = measure(args, python, log)
    except Usage as exc:
        print(f"containernet_startup: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted):
        print("interrupted; the lab in progress was removed", file=sys.stderr)
        return 130
    result = {"cpus": os.cpu_count(), "started_at": started, "kinds": args.kinds,
              "rows": rows}
    print(json.dumps(result, indent=2) if args.json else table(rows, args.kinds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
