"""Running experiments and writing the combined report.

Each experiment module offers params(quick), run(bench) -> result, markdown(result)
and plot(result, path); this module adds the machine record, timing and files, and
for `all` one markdown report with every experiment.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import ModuleType

from nestednet.bench import fidelity, links, memory, paper, routing, scaling, startup, stress
from nestednet.bench.common import Bench, bench_run, machine_info
from nestednet.errors import UsageError

EXPERIMENTS: dict[str, ModuleType] = {
    "memory": memory, "links": links, "stress": stress, "scaling": scaling,
    "startup": startup, "fidelity": fidelity, "routing": routing,
}
"""In the order `all` runs them: memory and links share their labs, so memory is
measured on idle labs before any traffic."""
ON_ITS_OWN = ("routing",)
"""Not in `all` (the paper's evaluation): run by name."""
NOISE_NOTE = ("The machine was shared with other workloads during the run (see "
              "loadavg); figures are medians and are noisy.")


def names(experiment: str) -> list[str]:
    if experiment == "all":
        return [name for name in EXPERIMENTS if name not in ON_ITS_OWN]
    if experiment not in EXPERIMENTS:
        raise UsageError(f"unknown experiment {experiment!r}: choose from "
                         f"{', '.join([*EXPERIMENTS, 'all'])}")
    return [experiment]


def run_one(bench: Bench, name: str, machine: dict) -> dict:
    module = EXPERIMENTS[name]
    started = time.monotonic()
    result = module.run(bench)
    result["machine"] = machine
    result["mode"] = "quick" if bench.quick else "full"
    result["seed"] = bench.seed
    result["duration_s"] = round(time.monotonic() - started, 1)
    result["loadavg_at_end"] = list(os.getloadavg())
    text = header(name, result) + module.markdown(result)
    return bench.write(name, result, text, module.plot)


def header(name: str, result: dict) -> str:
    m = result["machine"]
    return (f"<!-- nestednet bench {name} ({result['mode']}) -->\n"
            f"_Machine: {m['cores']} cores, {m['memory_mb']} MB, kernel {m['kernel']}, OVS "
            f"{m.get('ovs')} datapath {m['ovs_datapath']}, Docker {m.get('docker')}; "
            f"{result['mode']} mode, took {result['duration_s']} s; load average "
            f"{_load(m['loadavg_at_start'])} at start, {_load(result['loadavg_at_end'])} at "
            "end._\n\n")


def _load(values) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def report(results: dict[str, dict], machine: dict, quick: bool) -> str:
    """The combined markdown report of an `all` run (pure)."""
    lines = ["# NestedNet evaluation: nested vs flat (Containernet-style)", "",
             f"Mode: {'quick' if quick else 'full'}. Machine: {machine['cores']} cores, "
             f"{machine['memory_mb']} MB RAM, kernel {machine['kernel']}, OVS "
             f"{machine.get('ovs')} ({machine['ovs_datapath']} datapath), Docker "
             f"{machine.get('docker')}, cgroup {machine.get('cgroup')}.", "",
             f"Paper values: {paper.SOURCE} (each section names its table or figure); "
             f"its setup: {paper.SETUP}. `-` marks a value the paper does not print. "
             + NOISE_NOTE, ""]
    for name in EXPERIMENTS:
        if name not in results:
            continue
        result = results[name]
        if "error" in result:
            lines += [f"## {name}: FAILED", "", f"    {result['error']}", ""]
            continue
        lines.append(EXPERIMENTS[name].markdown(result))
        if "png" in result.get("files", {}):
            lines += [f"![{name}]({result['files']['png']})", ""]
        lines += [f"_({result['duration_s']} s; data: {result['files']['json']})_", ""]
    return "\n".join(lines)


def run_suite(experiment: str, out, *, quick: bool, seed: int = 1,
              log=lambda message: None, nodes: tuple[int, ...] = (),
              repeats: int | None = None) -> dict:
    """Run one experiment or `all`; returns {name: result}. With `all`, a failing
    experiment is recorded in the report and the others still run. ``nodes`` and
    ``repeats`` replace the startup experiment's node counts and creations per point,
    or the routing experiment's line lengths and measurements per point."""
    wanted = names(experiment)
    if (nodes or repeats is not None) and wanted not in (["startup"], ["routing"]):
        raise UsageError("--nodes and --repeats apply to `bench startup` and "
                         "`bench routing` only")
    out = Path(out)
    machine = machine_info()
    results: dict[str, dict] = {}
    with bench_run(out, quick, seed, log, nodes=nodes, repeats=repeats) as bench:
        for name in wanted:
            log(f"experiment {name} ({'quick' if quick else 'full'})")
            if len(wanted) == 1:
                results[name] = run_one(bench, name, machine)
                continue
            try:
                results[name] = run_one(bench, name, machine)
            except Exception as exc:  # keep the suite going; the report says what failed
                log(f"experiment {name} failed: {exc}")
                results[name] = {"experiment": name, "error": f"{type(exc).__name__}: {exc}"}
            if name == "links":
                bench.close()  # memory/links labs are not needed by later experiments
    if len(wanted) > 1:
        (out / "report.md").write_text(report(results, machine, quick))
    return results
