"""The import graph of nestednet/ and linkemu/, built from every import statement
(function-level ones included): dependencies run one way and model/ stays pure."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("nestednet", "linkemu")
MODEL_ALLOWED_THIRD_PARTY = {"jsonschema"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _type_only(tree: ast.AST) -> set[ast.AST]:
    """Import statements under ``if TYPE_CHECKING:``: read by type checkers, never run."""
    found: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",
                                                                    "typing.TYPE_CHECKING"):
            found.update(inner for stmt in node.body for inner in ast.walk(stmt)
                         if isinstance(inner, ast.Import | ast.ImportFrom))
    return found


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports, anywhere in its body, as dotted names (imports only
    a type checker reads, under ``if TYPE_CHECKING:``, are left out)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    type_only = _type_only(tree)
    for node in ast.walk(tree):
        if node in type_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _resolve(target: str, modules: dict[str, Path]) -> str:
    """The module of ours an imported name lives in ("" when it is not ours)."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target


def _graph() -> dict[str, set[str]]:
    """Edges between our own modules; `from pkg import mod` counts as an edge to pkg.mod
    (and to pkg: its __init__ runs too)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        targets = {_resolve(t, modules) for t in _imports(name, path)}
        graph[name] = targets - {"", name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the list of modules along it, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _is_package_parent(importer: str, target: str) -> bool:
    """A module importing its own package's __init__ (e.g. nestednet.x -> nestednet) is
    not a circle of ours unless that __init__ imports back; __init__s here hold only
    constants and docstrings, which test_init_modules_import_nothing_of_ours checks."""
    return importer.startswith(target + ".")


def test_no_import_circles() -> None:
    graph = {name: {t for t in edges if not _is_package_parent(name, t)}
             for name, edges in _graph().items()}
    assert _cycle(graph) is None, f"import circle: {' -> '.join(_cycle(graph) or [])}"


def test_init_modules_import_nothing_of_ours_except_cli_roots() -> None:
    modules = _modules()
    for name, path in modules.items():
        if path.name != "__init__.py" or name.endswith(".cli") or name.endswith(".agent"):
            continue
        ours = {t for t in _imports(name, path) if t.split(".")[0] in PACKAGES}
        assert not ours, f"{name}/__init__.py imports {sorted(ours)}"


def test_nestednet_never_imports_linkemu() -> None:
    bad = [(name, target) for name, edges in _graph().items() if name.startswith("nestednet")
           for target in edges if target.startswith("linkemu")]
    assert not bad, bad


def test_model_imports_only_model_errors_stdlib_and_jsonschema() -> None:
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if not name.startswith("nestednet.model"):
            continue
        for target in _imports(name, path):
            top = target.split(".")[0]
            if top in PACKAGES:
                ours = _resolve(target, modules)
                if not (ours in ("nestednet", "nestednet.errors")
                        or ours.startswith("nestednet.model")):
                    bad.append((name, ours))
            elif top not in sys.stdlib_module_names and top not in MODEL_ALLOWED_THIRD_PARTY \
                    and top != "__future__":
                bad.append((name, target))
    assert not bad, bad


ORBITS_ALLOWED_THIRD_PARTY = {"jsonschema", "numpy", "sgp4", "skyfield"}


def test_orbits_imports_only_model_errors_stdlib_and_orbit_libraries() -> None:
    """orbits/ is model-like (no side effects, no Docker, no OVS) but needs the orbit
    libraries; the model itself stays free of them (the test above)."""
    modules = _modules()
    bad = []
    for name, path in modules.items():
        if not name.startswith("nestednet.orbits"):
            continue
        for target in _imports(name, path):
            top = target.split(".")[0]
            if top in PACKAGES:
                ours = _resolve(target, modules)
                if not (ours in ("nestednet", "nestednet.errors")
                        or ours.startswith(("nestednet.model", "nestednet.orbits"))):
                    bad.append((name, ours))
            elif top not in sys.stdlib_module_names and top not in ORBITS_ALLOWED_THIRD_PARTY \
                    and top != "__future__":
                bad.append((name, target))
    assert not bad, bad
    assert any(n.startswith("nestednet.orbits.") for n in modules), "orbits/ not found"


def test_graph_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    """The walk must see imports inside functions, or the circle check proves nothing."""
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from nestednet.lab import flat\n    from . import x\n")
    found = _imports("nestednet.cli.probe", path)
    assert {"nestednet.lab.flat", "nestednet.cli.x"} <= found
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_function_level_imports_of_ours_say_why() -> None:
    """A function-level import of our own modules is allowed only to keep the command
    lines quick to start, and says so in a `# Lazy:` comment just above its block."""
    silent = []
    for name, path in _modules().items():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(node):
                if not isinstance(inner, ast.Import | ast.ImportFrom):
                    continue
                names = [inner.module or ""] if isinstance(inner, ast.ImportFrom) else \
                    [alias.name for alias in inner.names]
                relative = getattr(inner, "level", 0)
                if not relative and not any(n.split(".")[0] in PACKAGES for n in names):
                    continue
                above = inner.lineno - 2
                while (above >= 0 and lines[above].strip().startswith(("from ", "import "))) \
                        or (above >= 0 and not lines[above].strip()):
                    above -= 1
                if not lines[above].strip().startswith("# Lazy"):
                    silent.append(f"{name}:{inner.lineno}")
    assert not silent, silent


def test_readme_layout_table_names_every_part_of_the_tree() -> None:
    """The layout table (docs/development.md, where the README's depth moved)."""
    text = (ROOT / "docs" / "development.md").read_text()
    table = text[text.index("## Repository layout"):text.index("## Tests")]
    parts = [p for p in sorted((ROOT / "nestednet").iterdir())
             if not p.name.startswith(("_", ".")) and (p.is_dir() or p.suffix == ".py")]
    missing = [p.name for p in parts
               if f"`nestednet/{p.name}/`" not in table and f"`{p.name}`" not in table
               and f"`{p.name}/`" not in table]
    assert not missing, f"docs/development.md's layout table lacks {missing}"


CLI_FORBIDDEN = ("docker", "ovs", "ovsdbapp", "pyroute2", "os_ken", "eventlet",
                 "nestednet.adapters", "nestednet.lab", "nestednet.ca")
"""What the command line must not import, anywhere in a module: the engine, OVS and
netlink libraries and our adapters over them, and the lab and CA runtimes, which it
reaches through the Python API (nestednet.api). Type-only imports are left out."""


def test_the_command_line_reaches_labs_only_through_the_api() -> None:
    bad = []
    for name, path in _modules().items():
        if not name.startswith("nestednet.cli"):
            continue
        for target in _imports(name, path):
            if any(target == f or target.startswith(f + ".") for f in CLI_FORBIDDEN):
                bad.append(f"{name} imports {target}")
    assert not bad, bad


def test_the_command_line_starts_without_docker_ovs_or_netlink() -> None:
    """Start-up cost: importing the command line (what every `nestednet` run does before
    parsing) loads none of the heavy runtime libraries."""
    code = ("import sys, nestednet.cli\n"
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True, cwd=ROOT).stdout.split())
    assert not loaded & {"docker", "ovs", "ovsdbapp", "pyroute2", "os_ken", "eventlet"}


def test_the_cli_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    from nestednet.lab import nodes\n    import docker.errors\n")
    found = _imports("nestednet.cli.probe", path)
    assert {"nestednet.lab.nodes", "docker.errors"} <= found
