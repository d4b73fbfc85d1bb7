"""Pure models: no side effects, no I/O beyond reading a file the caller names.

- `topology`: a lab's shape (nodes x iPHYs) and the names of everything in it.
- `addressing`: the address plan (intra-node, inter-node, control nets).
- `link_rules`: rules for manual inter-node links.
- `link_table`: `InterNodeLinks`, the CA's link table and Algorithm 1.
- `line_of_sight`, `visibility`: who sees whom; synthetic mobility.
- `scenario`, `scenario_file`, `scenario_native`, `scenario_nestednet`: the scenario
  timeline and its two file formats.
- `events`: the run's event record (JSON lines).
- `tcplan`, `units`: the shaping library's plan (`LinkShape`, `Leaf`, `TcPlan`) and
  the quantities it is written in ("5Mbit", "20ms", "1%").
"""
