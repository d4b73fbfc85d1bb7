"""A node's inner data root from the image template (nestednet.lab.node_image): the
engine's files copied, each layer's diff/ left to a read-only bind of the template's,
and a template that a recorded lab's node mounts is never pruned."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nestednet.lab import node_image

pytestmark = pytest.mark.unit

LAYER = "ab" * 32


def _template(root: Path) -> Path:
    """The shape Docker 20.10's overlay2 store gives one squashed image layer."""
    docker = root / "docker"
    diff = docker / "overlay2" / LAYER / "diff"
    (diff / "usr" / "bin").mkdir(parents=True)
    (diff / "usr" / "bin" / "tool").write_text("binary")
    (docker / "overlay2" / LAYER / "link").write_text("SHORTNAME")
    (docker / "overlay2" / "l").mkdir()
    os.symlink(f"../{LAYER}/diff", docker / "overlay2" / "l" / "SHORTNAME")
    (docker / "image" / "overlay2").mkdir(parents=True)
    (docker / "image" / "overlay2" / "repositories.json").write_text("{}")
    return docker


def test_clone_copies_the_engines_files_and_leaves_each_layers_tree_to_a_bind(tmp_path):
    template = _template(tmp_path / "templates" / "key1")
    dest = tmp_path / "labs" / "nn" / "n1" / "docker"
    node_image.clone(template, dest)

    assert (dest / "image" / "overlay2" / "repositories.json").read_text() == "{}"
    assert (dest / "overlay2" / LAYER / "link").read_text() == "SHORTNAME"
    assert os.readlink(dest / "overlay2" / "l" / "SHORTNAME") == f"../{LAYER}/diff"
    assert list((dest / "overlay2" / LAYER / "diff").iterdir()) == []
    assert (dest / node_image.TEMPLATE_MARK).read_text().strip() == str(template)

    binds = node_image.parent_binds(tmp_path / "state", dest, template)
    assert binds[str(template / "overlay2" / LAYER / "diff")] == {
        "bind": f"/var/lib/docker/overlay2/{LAYER}/diff", "mode": "ro"}
    assert binds[str(dest)] == {"bind": "/var/lib/docker", "mode": "rw"}
    assert len(binds) == 3
    assert len(node_image.parent_binds(tmp_path / "state", dest)) == 2


def test_a_template_a_recorded_lab_mounts_is_kept_and_an_unused_old_one_pruned(
        tmp_path, monkeypatch):
    templates, labs = tmp_path / "templates", tmp_path / "labs"
    monkeypatch.setattr(node_image, "TEMPLATES_DIR", templates)
    used, unused, current = (_template(templates / k) for k in ("used", "unused", "current"))
    node_image.clone(used, labs / "nn" / "n2" / "docker")
    old = time.time() - 2 * 3600
    for t in (used, unused):
        os.utime(t.parent, (old, old))

    assert node_image.in_use(labs) == ["used"]
    node_image._prune(keep="current", labs=labs)
    assert used.is_dir() and current.is_dir()
    assert not unused.parent.exists()
