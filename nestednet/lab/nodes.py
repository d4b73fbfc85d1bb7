"""Reaching the nodes of an existing lab: parent containers, inner engines, memory."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from nestednet.adapters import docker_engine
from nestednet.errors import EnvironmentProblem
from nestednet.lab import engine
from nestednet.lab import record as lab_record
from nestednet.lab.record import LabRecord
from nestednet.model import topology as topo


@dataclass
class Lab:
    record: LabRecord
    meta: dict
    shape: topo.Shape
    client: docker.DockerClient

    @classmethod
    def open(cls, name: str) -> Lab:
        record = lab_record.load(name)
        meta = record.meta()
        if not meta:
            raise EnvironmentProblem(f"lab {name} has no readable lab.json (a crashed create?)",
                                     hint="`nestednet cleanup` or `nestednet delete --lab "
                                          f"{name}`")
        if meta.get("status") != "complete":
            raise EnvironmentProblem(f"lab {name} is not complete (status {meta.get('status')})",
                                     hint="wait for its create to finish, or `nestednet "
                                          "cleanup` if that create crashed")
        return cls(record, meta, topo.Shape(meta["nodes"], meta["iphys"]),
                   docker_engine.connect())

    def state_dir(self, node: int) -> Path:
        return self.record.node_dir(node) / "state"

    def data_dir(self, node: int) -> Path:
        """The node's inner engine's data root (bound into its parent)."""
        return self.record.node_dir(node) / "docker"

    def parent(self, node: int) -> docker.models.containers.Container:
        name = topo.parent_container(self.record.lab, node)
        try:
            return self.client.containers.get(name)
        except docker.errors.NotFound as exc:
            raise EnvironmentProblem(f"node parent {name} is gone",
                                     hint=f"`nestednet delete --lab {self.record.lab}` and "
                                          "create the lab again") from exc

    def check_alive(self, node: int) -> None:
        """EnvironmentProblem naming a dead node (its parent stopped or killed): its inner
        engine, OVS and veths are gone with it, so the lab must be made again."""
        parent = self.parent(node)
        if parent.status != "running":
            raise EnvironmentProblem(
                f"node {topo.node_name(node)} is dead: its parent container {parent.name} "
                f"is {parent.status}, and its components, switch and links went with it",
                hint=f"a node cannot be brought back in place: `nestednet delete --lab "
                     f"{self.record.lab}` and create the lab again")

    @contextlib.contextmanager
    def inner(self, node: int) -> Iterator[docker.DockerClient]:
        """The node's inner engine, woken if parked (nestednet.lab.engine)."""
        self.check_alive(node)
        with engine.using(self.state_dir(node), self.parent(node)) as client:
            yield client

    def wake_engines(self) -> None:
        """Wake every node's parked engine at once, before using them one by one."""
        engine.wake_all((self.state_dir(n), self.parent(n)) for n in self.shape.node_numbers())

    def child(self, inner: docker.DockerClient, component: str
              ) -> docker.models.containers.Container:
        try:
            return inner.containers.get(component)
        except docker.errors.NotFound as exc:
            raise EnvironmentProblem(f"component {component} not found in its node") from exc


