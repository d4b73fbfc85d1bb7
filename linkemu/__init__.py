"""linkemu: a dynamic link emulator (Open vSwitch router via os-ken rest_router + Linux tc).

Builds on nestednet's lower layers (errors, adapters, capabilities, console, and the
shaping library nestednet.model.tcplan + nestednet.adapters.tc); nestednet never
imports linkemu.

- `model`: `EmulatedLinks`, the links to emulate and the emulator they pass through.
- `linksfile`: the thesis's Linksimulation format and the native one, both to
  `EmulatedLinks`.
- `router_plan`, `router_api`, `router`: the router's addressing, its REST client,
  and the os-ken process.
- `shaping`: apply, set, show, clear; `editor`: the interactive link editor.
- `testbed`: the whole emulator on one machine; `measure`: ping and iperf3 on it.
- `cli/`: the `linkemu` command line.
"""
