"""Traffic between components: iperf3 transfers and ping, run inside the lab.

Servers and clients run in the components themselves through `exec`, bound to the
component's own address, so the same commands measure nested children and flat
processes. Everything is bounded in time; nothing leaves the lab's namespaces.
"""

from __future__ import annotations

from nestednet.bench import stats
from nestednet.bench.common import run_in
from nestednet.errors import EnvironmentProblem

BASE_PORT = 5201
CONNECT_TRIES = 25


def start_server(lab, node: str, component: str, port: int, seconds: float,
                 bind: str | None = None) -> None:
    """A one-shot iperf3 server in the background of a component, gone after one test
    or after ``seconds``."""
    bind_opt = f"-B {bind} " if bind else ""
    script = (f"timeout {int(seconds)} iperf3 -s -1 -p {port} {bind_opt}"
              ">/dev/null 2>&1 </dev/null &")
    code, _, err = run_in(lab, node, component, ["sh", "-c", script], timeout=20)
    if code != 0:
        raise EnvironmentProblem(f"iperf3 server in {node} {component} failed: {err.strip()}")


def transfer(lab, node: str, component: str, dst: str, port: int, seconds: float, *,
             src: str | None = None, streams: int = 1, interval: float = 1.0) -> dict:
    """A TCP transfer ``component`` -> dst:port (iperf3 -J); retries until the server
    listens. Returns stats.parse_iperf's dict plus the wall time it was started."""
    opts = f"-c {dst} -p {port} -t {seconds:g} -i {interval:g} -P {streams} -J"
    if src:
        opts += f" -B {src}"
    # Retry only while the server is not yet listening (iperf3 then exits at once).
    # The first line is the wall time of the attempt that ran (one kernel clock for all
    # components), to align transfers started in different components.
    script = (f"i=0; while :; do t0=$(date +%s.%N); out=$(iperf3 {opts} 2>&1) && break; "
              f"i=$((i+1)); [ $i -ge {CONNECT_TRIES} ] && break; sleep 0.2; done; "
              f"printf '%s\\n%s' \"$t0\" \"$out\"")
    _, out, _ = run_in(lab, node, component, ["sh", "-c", script],
                         timeout=seconds + CONNECT_TRIES * 0.5 + 20)
    first, _, rest = out.partition("\n")
    result = stats.parse_iperf(rest)
    try:
        result["started_at"] = float(first)
    except ValueError:
        result["started_at"] = result["start"]
    return result


def ping(lab, node: str, component: str, dst: str, *, src: str | None = None,
         count: int = 5, interval: float = 0.2) -> dict:
    argv = ["ping", "-q", "-n", "-c", str(count), "-i", f"{interval:g}", "-W", "2"]
    if src:
        argv += ["-I", src]
    _, out, err = run_in(lab, node, component, [*argv, dst],
                         timeout=count * interval + 10)
    return stats.parse_ping(out + err)


def measured_pair(lab, client: tuple[str, str], server: tuple[str, str], dst: str, src: str,
                  port: int, seconds: float) -> dict:
    """Server then client: one iperf3 measurement between two components."""
    start_server(lab, server[0], server[1], port, seconds + 40)
    return transfer(lab, client[0], client[1], dst, port, seconds, src=src)
