"""What every experiment shares: the machine record, labs, running tools in components,
and writing results (JSON + PNG + markdown) into the output directory.

Labs made here are named `b<tag><n>` (the bench's name space) and always deleted
again, also when an experiment fails or is interrupted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nestednet import __version__
from nestednet.adapters import docker_engine
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import cgroup_version, ovs_datapath
from nestednet.errors import EnvironmentProblem
from nestednet.lab.components import exec_in
from nestednet.lab.create import CreateRequest, create
from nestednet.lab.nodes import Lab
from nestednet.lab.teardown import delete_lab

LAB_PREFIX = "b"


def machine_info() -> dict:
    """Cores, memory, kernel, OVS datapath and versions: what makes runs comparable."""
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    info = {
        "cores": os.cpu_count(),
        "memory_mb": int(meminfo["MemTotal"].split()[0]) // 1024,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "nestednet": __version__,
        "ovs_datapath": ovs_datapath(),
        "cgroup": cgroup_version(),
        "loadavg_at_start": os.getloadavg(),
    }
    try:
        client = docker_engine.connect(timeout=10)
        info["docker"] = docker_engine.engine_version(client)
        client.close()
    except EnvironmentProblem as exc:
        info["docker"] = f"unreachable: {exc}"
    try:
        with Ovsdb() as ovs:
            info["ovs"] = ovs.ovs_version()
    except EnvironmentProblem as exc:
        info["ovs"] = f"unreachable: {exc}"
    return info


def cpu_busy_percent(seconds: float) -> float:
    """Share of all cores' time the host spent busy over the next ``seconds`` (percent):
    what an idle lab costs the machine, whoever spends it (daemons, ksoftirqd, OVS)."""

    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])

    busy0, total0 = sample()
    time.sleep(seconds)
    busy1, total1 = sample()
    return round(100.0 * (busy1 - busy0) / max(total1 - total0, 1), 1)


def machine_speed(repeats: int = 5) -> float:
    """CPU seconds one process spends on a fixed workload (hashing 200 MB, a loop of
    2 million steps), median of ``repeats``: the machine's own speed, measured beside a
    timing.

    This machine is a shared VM whose speed drifts on its own: this workload took 0.27 to
    0.40 CPU-s within minutes with nothing of ours running (1-minute load under 1.5), and
    a create's processes (the CLI, dockerd, the nodes) all slowed by about the same
    factor at such times (docs/benchmarks.md, session 30). CPU time, not wall time: what
    other processes running at the same moment take from it is not the machine's speed.
    """
    def once() -> float:
        block = bytes(1 << 20)
        start = time.process_time()
        digest = hashlib.sha256()
        for _ in range(200):
            digest.update(block)
        total = 0
        for i in range(2_000_000):
            total += i * i
        return time.process_time() - start

    times = sorted(once() for _ in range(repeats))
    return round(times[len(times) // 2], 3)


@dataclass(frozen=True)
class LabSpec:
    kind: str
    """"nested" or "flat"."""
    nodes: int
    iphys: int
    cpus: float | None = None
    routing: str = "none"

    def describe(self) -> str:
        limit = f", --cpus {self.cpus}" if self.cpus else ""
        return f"{self.kind} {self.nodes}x{self.iphys}{limit}"


@dataclass
class Bench:
    """One bench run: where results go, quick or full, the random source, the labs."""

    out: Path
    quick: bool
    seed: int = 1
    log: Callable[[str], None] = lambda message: None
    nodes: tuple[int, ...] = ()
    """Node counts asked for on the command line (`startup`); empty: the mode's own."""
    repeats: int | None = None
    """Creations per point asked for on the command line (`startup`)."""
    labs: dict[LabSpec, object] = field(default_factory=dict)
    _counter: int = 0

    def __post_init__(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(self.seed)

    def _name(self) -> str:
        self._counter += 1
        return f"{LAB_PREFIX}{os.getpid() % 1000}x{self._counter}"

    def lab(self, spec: LabSpec):
        """A lab of ``spec``, made once per run and shared by the experiments needing it."""
        if spec not in self.labs:
            self.labs[spec] = self.create(spec)[0]
        return self.labs[spec]

    def create(self, spec: LabSpec):
        """A new lab (the caller releases it, or close() does); returns (Lab, create meta)."""
        name = self._name()
        self.log(f"creating {spec.describe()} lab {name}")
        meta = create(CreateRequest(lab=name, nodes=spec.nodes, iphys=spec.iphys,
                                    cpus=spec.cpus, design=spec.kind, routing=spec.routing))
        lab = Lab.open(name)
        return lab, meta

    def release(self, lab) -> None:
        for spec, cached in list(self.labs.items()):
            if cached is lab:
                del self.labs[spec]
        delete_lab(lab.record)

    def close(self) -> None:
        for lab in list(self.labs.values()):
            self.release(lab)

    def write(self, name: str, result: dict, markdown: str,
              plot: Callable[[dict, Path], None] | None) -> dict:
        """`<name>.json`, `<name>.png` and `<name>.md` in the output directory."""
        files = {"json": f"{name}.json", "markdown": f"{name}.md"}
        if plot is not None:
            try:
                plot(result, self.out / f"{name}.png")
                files["png"] = f"{name}.png"
            except Exception as exc:  # a plot failure must not lose the measurements
                result.setdefault("notes", []).append(f"plot failed: {exc}")
        result["files"] = files
        (self.out / files["json"]).write_text(json.dumps(result, indent=2, default=str))
        image = f"\n![{name}]({files['png']})\n" if "png" in files else ""
        (self.out / files["markdown"]).write_text(markdown + image)
        return result


@contextlib.contextmanager
def bench_run(out: Path, quick: bool, seed: int = 1,
              log: Callable[[str], None] = lambda m: None, *, nodes: tuple[int, ...] = (),
              repeats: int | None = None) -> Iterator[Bench]:
    bench = Bench(out, quick, seed, log, nodes=nodes, repeats=repeats)
    try:
        yield bench
    finally:
        bench.close()


def run_in(lab, node: str, component: str, argv: list[str], timeout: float) -> tuple[int, str,
                                                                                      str]:
    """Run ``argv`` in a component (nested child or flat process) and collect its output.

    Bounded twice: coreutils `timeout` inside the component and a join here.
    """
    out: list[bytes] = []
    err: list[bytes] = []
    result: dict = {}

    def target() -> None:
        try:
            result["code"] = exec_in(lab, node, component,
                                     ["timeout", str(int(timeout)), *argv], out.append,
                                     err.append)
        except Exception as exc:  # surfaced below, in the caller's thread
            result["error"] = exc

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(timeout + 30)
    if worker.is_alive():
        raise EnvironmentProblem(f"{node} {component}: {argv[0]} did not return within "
                                 f"{timeout + 30:.0f} s")
    if "error" in result:
        raise result["error"]
    return (result["code"], b"".join(out).decode(errors="replace"),
            b"".join(err).decode(errors="replace"))


def in_parallel(jobs: list[Callable[[], object]]) -> list[object]:
    """Run ``jobs`` at the same time (simultaneous connections); results in order."""
    results: list[object] = [None] * len(jobs)
    errors: list[BaseException] = []

    def wrap(i: int, job: Callable[[], object]) -> None:
        try:
            results[i] = job()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i, j), daemon=True)
               for i, j in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def cell(value: float | None, digits: int = 2) -> str:
    """A measured number in a report table, or "-" where it was not measured."""
    return "-" if value is None else f"{value:.{digits}f}"


def pyplot():
    """matplotlib.pyplot on the Agg backend: reports are written on hosts with no display,
    and matplotlib is imported only by the commands that plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> None:
    """Write a report figure as PNG and free it (benches draw many in one process)."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)
