"""Reading an engine's containers from its data root (docker_engine.stored_containers)."""

from __future__ import annotations

import json

import pytest

from nestednet.adapters.docker_engine import StoredContainer, stored_containers

pytestmark = pytest.mark.unit


def _write(root, ident: str, text: str) -> None:
    entry = root / "containers" / ident
    entry.mkdir(parents=True)
    (entry / "config.v2.json").write_text(text)


def test_names_ids_and_pids_as_the_engine_wrote_them(tmp_path):
    # the fields as a Docker 20.10 engine in a node wrote them (other keys left out)
    _write(tmp_path, "36007cfc", json.dumps({
        "ID": "36007cfc", "Name": "/gnab", "State": {"Running": True, "Pid": 142}}))
    _write(tmp_path, "29788017", json.dumps({
        "ID": "29788017", "Name": "/iphy2", "State": {"Running": False, "Pid": 0}}))
    _write(tmp_path, "half", '{"ID": "half", "Name": "/iphy1", "Sta')
    _write(tmp_path, "nostate", json.dumps({"ID": "nostate", "Name": "/iphy3"}))
    (tmp_path / "containers" / "empty").mkdir()
    assert stored_containers(tmp_path) == {
        "gnab": StoredContainer("36007cfc", "gnab", True, 142),
        "iphy2": StoredContainer("29788017", "iphy2", False, 0)}


def test_a_data_root_without_containers_gives_nothing(tmp_path):
    assert stored_containers(tmp_path / "absent") == {}
