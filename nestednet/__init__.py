"""NestedNet: a nested-container emulator for hierarchical software-defined networks.

As a library: ``import nestednet as nn``, then ``nn.Lab.create(...)``,
``nn.Scenario.load(...)`` (nestednet.api; docs/api.md). The names below are loaded
on first use, so importing the package stays cheap.

Layers, each importing only the ones below it (tests/unit/test_import_graph.py):

- `cli/`: the `nestednet` command line; parses, calls the API, prints. `console`:
  output conventions shared with linkemu.
- `api/`: the public Python API (labs, nodes, links, runs, scenarios).
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

TYPE_CHECKING = False
"""typing.TYPE_CHECKING without importing typing (which would triple this import's cost)."""

__version__ = "0.1.0"

LABEL_PREFIX = "org.nestednet"
"""Every Docker object NestedNet creates carries labels under this prefix."""

_PUBLIC = {
    "Lab": "nestednet.api.lab",
    "CreatePlan": "nestednet.api.lab",
    "delete_lab": ("nestednet.api.lab", "delete"),
    "cleanup": "nestednet.api.lab",
    "Node": "nestednet.api.nodes",
    "Component": "nestednet.api.nodes",
    "Result": "nestednet.api.process",
    "Process": "nestednet.api.process",
    "Link": "nestednet.api.links",
    "Direction": "nestednet.api.links",
    "Change": "nestednet.api.links",
    "Scenario": "nestednet.api.scenario",
    "Run": "nestednet.api.run",
    "RunRequest": "nestednet.api.run",
    "Event": "nestednet.api.run",
    "capture": "nestednet.api.capture",
    "LinkProperties": "nestednet.model.link_properties",
    "NestedNetError": "nestednet.errors",
    "InputError": "nestednet.errors",
    "EnvironmentProblem": "nestednet.errors",
    "Interrupted": "nestednet.errors",
    "ExitStatus": "nestednet.errors",
}
"""Public name -> module (or (module, name there)); see nestednet.api."""

__all__ = [
    "LABEL_PREFIX", "Change", "Component", "CreatePlan", "Direction", "EnvironmentProblem",
    "Event", "ExitStatus", "InputError", "Interrupted", "Lab", "Link", "LinkProperties",
    "NestedNetError", "Node", "Process", "Result", "Run", "RunRequest", "Scenario",
    "__version__", "capture", "cleanup", "delete_lab",
]

if TYPE_CHECKING:
    from nestednet.api.capture import capture
    from nestednet.api.lab import CreatePlan, Lab, cleanup
    from nestednet.api.lab import delete as delete_lab
    from nestednet.api.links import Change, Direction, Link
    from nestednet.api.nodes import Component, Node
    from nestednet.api.process import Process, Result
    from nestednet.api.run import Event, Run, RunRequest
    from nestednet.api.scenario import Scenario
    from nestednet.errors import (
        EnvironmentProblem,
        ExitStatus,
        InputError,
        Interrupted,
        NestedNetError,
    )
    from nestednet.model.link_properties import LinkProperties


def __getattr__(name: str) -> object:
    """Load a public name's module on first use (PEP 562)."""
    where = _PUBLIC.get(name)
    if where is None:
        raise AttributeError(f"module 'nestednet' has no attribute {name!r}")
    import importlib  # here: even importlib's package costs start-up when imported above

    module, attribute = where if isinstance(where, tuple) else (where, name)
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
