"""NestedNet's public Python API: what ``import nestednet as nn`` gives.

One concept per module; `nestednet` re-exports their public names lazily (so the
command line, which imports `nestednet`, starts without loading Docker's client):

- `lab`: `Lab` (create, open, nodes, links, run, delete), `CreatePlan`, `delete`,
  `cleanup`.
- `nodes`: `Node` and `Component` (addresses, status, exec, popen).
- `process`: `Result` of a finished command, `Process` for a running one.
- `links`: `Link` with its `Direction`s; `set` returns `Change`s.
- `scenario`: `Scenario` (load, generate, build, save).
- `run`: `Run`, a scenario playing on a lab (typed events, stop, summary).
- `capture`: `capture`, pcapng from iPHY ports.

Errors are those of nestednet.errors: `InputError` (bad input: the message says
where), `EnvironmentProblem` (the machine), `Interrupted`, all `NestedNetError`s.
"""
