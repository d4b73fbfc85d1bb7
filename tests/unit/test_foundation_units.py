"""Pure pieces of the foundation: version ordering, input hashing, readiness, help text."""

from __future__ import annotations

import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from linkemu.cli import main as linkemu_main
from nestednet import images
from nestednet.capabilities import shaping
from nestednet.capabilities.check import Check
from nestednet.capabilities.report import ready_for_create
from nestednet.capabilities.vm import _version_key
from nestednet.cli import main as nestednet_main

pytestmark = pytest.mark.unit


def test_kernel_versions_sort_numerically():
    paths = ["/boot/vmlinuz-6.1.0-9-amd64", "/boot/vmlinuz-6.1.0-56-amd64",
             "/boot/vmlinuz-5.10.0-30-amd64"]
    newest = sorted(paths, key=_version_key, reverse=True)
    assert newest[0].endswith("6.1.0-56-amd64")
    assert newest[-1].endswith("5.10.0-30-amd64")


def test_ready_for_create_ignores_optional_checks():
    checks = [Check("docker", True, "", needed_for_create=True),
              Check("qdisc:netem", False, "MISSING")]
    assert ready_for_create(checks)
    checks.append(Check("ovs", False, "down", needed_for_create=True))
    assert not ready_for_create(checks)


def test_router_check_reports_a_slow_import_instead_of_crashing(monkeypatch):
    """Seen in the emulated VM: importing os-ken took over a minute and doctor died with
    a traceback. A timeout is a line of the report, not needed for create."""
    def too_slow(argv, **kwargs):
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
    monkeypatch.setattr(shaping.subprocess, "run", too_slow)
    check = shaping.router_check()
    assert not check.ok and not check.needed_for_create
    assert "not confirmed" in check.detail and "60 s" in check.detail


def test_inputs_hash_follows_content(tmp_path: Path):
    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "Dockerfile").write_text("FROM x\n")
    first = images.inputs_hash(tmp_path, ["img"], "sha256:base")
    assert images.inputs_hash(tmp_path, ["img"], "sha256:base") == first
    assert images.inputs_hash(tmp_path, ["img"], "sha256:other-base") != first
    (tmp_path / "img" / "Dockerfile").write_text("FROM y\n")
    assert images.inputs_hash(tmp_path, ["img"], "sha256:base") != first


def test_inputs_hash_ignores_bytecode(tmp_path: Path):
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    before = images.inputs_hash(tmp_path, ["pkg"], "b")
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert images.inputs_hash(tmp_path, ["pkg"], "b") == before


@pytest.mark.parametrize("cli", [nestednet_main, linkemu_main])
def test_help_lists_commands_with_explanations(cli):
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output
    commands = result.output.split("Commands:")[1].strip().splitlines()
    assert commands, result.output
    for line in commands:
        name, _, explanation = line.strip().partition(" ")
        assert explanation.strip(), f"command {name} has no one-line explanation"


def _command_paths(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name)
        if isinstance(command, click.Group):
            yield from _command_paths(command, (*path, name))


@pytest.mark.parametrize("cli", [nestednet_main, linkemu_main])
def test_no_help_page_prints_a_bound_it_does_not_have(cli):
    """click describes a FloatRange with no bounds as `[x<=None]` (create's --cpus did)."""
    for path in _command_paths(cli):
        result = CliRunner().invoke(cli, [*path, "--help"], terminal_width=200)
        assert result.exit_code == 0, (path, result.output)
        assert "None]" not in result.output and "x<=None" not in result.output, \
            (path, result.output)
