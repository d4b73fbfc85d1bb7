"""`nestednet bench`: the NestedNet paper's evaluation, nested and flat side by side.

- `suite`: running experiments, the combined report; `common`: what they share.
- `memory`, `links`, `stress`, `scaling`, `startup`: one experiment each (paper
  Tables I-IV, Figs. 3-4).
- `traffic`, `procmem`, `stats`: iperf3/ping in components, /proc memory, statistics.
- `paper`: the paper's published figures.
"""
