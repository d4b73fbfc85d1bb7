"""NestedNet: a nested-container emulator for hierarchical software-defined networks.

Layers, each importing only the ones below it (tests/unit/test_import_graph.py):

- `cli/`: the `nestednet` command line; parses, calls, prints. `console`: output
  conventions shared with linkemu.
- `ca/` (communication assistant), `bench/` (the paper's evaluation): runtimes that
  drive labs.
- `lab/`: the runtime of a lab (create with a node design, status, exec, links,
  teardown). `images`, `capabilities/`: images and what this machine can do.
- `adapters/`: thin wrappers over Docker, OVSDB, OpenFlow, netlink, tc, os-ken.
- `model/`: pure values and rules (topology, addresses, scenarios, link table, tc
  plans); imports only itself, `errors`, the standard library and jsonschema.
- `errors`: user-facing errors and the exit codes (`ExitStatus`).
- `agent/`: the GNAB agent, standard library only, baked into the component image.

`linkemu` builds on these lower layers; nothing here imports linkemu.
"""

__version__ = "0.1.0"

LABEL_PREFIX = "org.nestednet"
"""Every Docker object NestedNet creates carries labels under this prefix."""
