"""An iperf3 transfer across a shaped link whose rate drops mid-transfer, plotted.

n1 and n2 are linked at 20 Mbit/s; 4 s into an 8 s TCP transfer the link is set to
5 Mbit/s in place (tc change: the connection survives). The throughput of every 0.5 s
interval goes to a PNG, with the moment of the change marked.

    sudo .venv/bin/python docs/examples/iperf_rate_change.py [OUT.png] [LAB]
"""

from __future__ import annotations

import json
import sys
import time

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt

import nestednet as nn

SECONDS, CHANGE_AT = 8, 4.0


def main(out: str = "/tmp/iperf-rate-change.png", lab_name: str = "exiperf") -> int:
    with nn.Lab.create(lab_name, nodes=2, iphys=1) as lab:
        sender, receiver = lab.node("n1").iphy(1), lab.node("n2").iphy(1)
        link = lab.link(sender, receiver, rate="20Mbit")
        server = receiver.popen("iperf3 -s -1")
        time.sleep(0.5)  # let the server listen
        started = time.monotonic()
        client = sender.popen(f"iperf3 -c {receiver.address} -t {SECONDS} -i 0.5 -J")
        time.sleep(CHANGE_AT)
        link.set(rate="5Mbit")
        changed = time.monotonic() - started
        report = json.loads(client.wait(SECONDS + 30).check("iperf3").stdout)
        server.wait(10)

    times = [i["sum"]["end"] for i in report["intervals"]]
    rates = [i["sum"]["bits_per_second"] / 1e6 for i in report["intervals"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.step(times, rates, where="post", label="TCP throughput per 0.5 s")
    ax.axvline(changed, color="red", linestyle="--", label="link.set(rate='5Mbit')")
    ax.set_xlabel("seconds since the client started")
    ax.set_ylabel("Mbit/s")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    before = [r for t, r in zip(times, rates, strict=True) if 1 < t <= changed]
    after = [r for t, r in zip(times, rates, strict=True) if t > changed + 1]
    print(f"before the change {sum(before) / len(before):.1f} Mbit/s, after "
          f"{sum(after) / len(after):.1f} Mbit/s; plot in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
