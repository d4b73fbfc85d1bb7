"""Play a scenario on a lab and react to its link events as they happen: each time the
communication assistant brings a link up, ping across it; count the links taken down.

The scenario is built in code: four nodes, visibility changing every 5 s.

    sudo .venv/bin/python docs/examples/scenario_events.py [LAB]
"""

from __future__ import annotations

import sys

import nestednet as nn

SCENARIO = nn.Scenario.build(
    nodes={"a": 2, "b": 2, "c": 2, "d": 2}, duration=20, name="square",
    steps=[(0, [("a", "b"), ("c", "d")]),
           (5, [("a", "b"), ("b", "c"), ("c", "d")]),
           (10, [("b", "c"), ("d", "a")]),
           (15, [])])


def main(lab_name: str = "exevents") -> int:
    failed = 0
    with nn.Lab.create(lab_name, nodes=4, iphys=2) as lab:
        with lab.run(SCENARIO, speed=2) as run:
            for event in run.events({"link_up", "link_down"}):
                (a, b), (ia, ib) = event.nodes, event.iphys
                where = f"t={event.scenario_time:4.1f} {a}:iphy{ia} <-> {b}:iphy{ib}"
                if event.event == "link_down":
                    print(f"{where} down")
                    continue
                # The k-th scenario node is lab node n<k>; run.component finds it.
                here, there = run.component(a, ia), run.component(b, ib)
                ping = here.exec(f"ping -c 1 -W 2 {there.address}")
                failed += not ping.ok
                print(f"{where} up; ping {'ok' if ping.ok else 'FAILED'}")
        summary = run.summary()
        print(f"links made {summary.links_up}, taken down {summary.links_down}, "
              f"requests {summary.requests}; events in {summary.events}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
