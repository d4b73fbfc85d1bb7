"""The documentation covers what it must: every public name of ``import nestednet as nn``
in the API reference, every page in the site's navigation, and examples that use only
the public API (a newcomer's view)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import nestednet as nn

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _resolve(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_reference_documents_every_public_name() -> None:
    directives = re.findall(r"^::: ([\w.]+)$", (DOCS / "reference.md").read_text(), re.M)
    documented = {id(_resolve(d)) for d in directives}
    public = [n for n in nn.__all__ if n not in ("LABEL_PREFIX", "__version__")]
    missing = [n for n in public if id(getattr(nn, n)) not in documented]
    assert not missing, f"docs/reference.md lacks {missing}"


def test_every_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert [p for p in pages if f" {p}" not in nav] == []


def test_examples_use_only_the_public_api() -> None:
    scripts = sorted((DOCS / "examples").glob("*.py"))
    assert len(scripts) >= 3
    examples_page = (DOCS / "examples.md").read_text()
    for script in scripts:
        tree = ast.parse(script.read_text())
        ours = [node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
                and any((alias.name if isinstance(node, ast.Import) else node.module or "")
                        .startswith("nestednet") for alias in node.names)]
        assert all(isinstance(n, ast.Import) and [a.name for a in n.names] == ["nestednet"]
                   for n in ours), f"{script.name} reaches past `import nestednet as nn`"
        assert f'--8<-- "docs/examples/{script.name}"' in examples_page, script.name
