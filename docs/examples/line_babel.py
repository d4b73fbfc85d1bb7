"""Three nodes in a line, routed by babel, and a ping from one end to the other.

n1 and n3 share no link: babel (in every component) learns the route through n2.

    sudo .venv/bin/python docs/examples/line_babel.py [LAB]
"""

from __future__ import annotations

import sys
import time

import nestednet as nn


def main(lab_name: str = "exline") -> int:
    with nn.Lab.create(lab_name, nodes=3, iphys=2, routing="babel") as lab:
        n1, n2, n3 = lab.nodes
        lab.link(n1.iphy(1), n2.iphy(1))
        lab.link(n2.iphy(2), n3.iphy(1))

        # babel needs a few hellos (0.5 s apart) to learn the two-hop route both ways.
        # ping exits 0 once any probe is answered, so wait for one answer, then measure.
        deadline = time.monotonic() + 60
        while not n1.exec(f"ping -c 1 -W 1 {n3.address}").ok:
            if time.monotonic() > deadline:
                break
            time.sleep(1)
        ping = n1.exec(f"ping -c 3 -i 0.3 {n3.address}")
        print(f"n1 -> n3 ({n3.address}) across n2:")
        print(ping.stdout)
        print("n1's routes:", n1.exec("ip route").stdout, sep="\n")
        return ping.exit_code  # the lab is deleted when the with block ends


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
