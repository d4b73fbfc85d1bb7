"""Playing a scenario's actions (nestednet.model.actions) during a run.

The player calls `ActionPlayer.play` at each cue's scenario time, on its own thread,
between steps; every cue returns quickly, so steps keep their time:

* link faults and a node's crash are *cuts*: the current step's visibility minus
  the cut pairs goes to the CA (`CommunicationAssistant.override_visibility`), which
  takes the links down as a step would; each later step is filtered the same way
  (`visible`) until the cut ends;
* a crash freezes the node's parent container (every process in it: inner engine,
  GNAB, iPHYs) or one component with the cgroup freezer (`docker pause`), and a
  node's links are cut as well; restart thaws it and gives its links back. Frozen
  is not rebooted: state survives, as after a suspend;
* degrade scales a pair's properties (RunShaping.factors) and re-shapes the links
  that stay up;
* capture writes pcapng from the host side of an iPHY's port (nestednet.lab.capture)
  into the run directory, each packet's scenario time in its comment;
* exec, ping and iperf run in a component through its node's inner engine
  (`docker exec`, nothing installed); their output is read on threads of their own
  and recorded as events with scenario time; a stop cue kills the process.

On close every job is stopped and everything frozen is thawed, whatever happened.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nestednet.adapters.capture import Capture
from nestednet.lab import capture as lab_capture
from nestednet.model import events as ev
from nestednet.model.actions import (
    DEFAULT_PING_INTERVAL,
    IPERF_BASE_PORT,
    Action,
    Cue,
    Cut,
    effective_visible,
    in_effect,
    timeline,
)
from nestednet.model.line_of_sight import Pair
from nestednet.model.scenario import Scenario

CaSession = Any
"""nestednet.ca.session.CaSession (which imports this module): lab, lab_node, ca, server,
events, shaping, directory()."""

log = logging.getLogger(__name__)

_PING_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from .*icmp_seq=(\d+).* time=([\d.]+) ms")
_PING_LOST = re.compile(r"^\[(\d+\.\d+)\] (?:no answer yet for|From .*) icmp_seq=(\d+)")
_IPERF_LISTENING = "Server listening on"
_IPERF_LINE = re.compile(r"^\[\s*\d+\]\s+([\d.]+)-([\d.]+)\s+sec\s+[\d.]+ \w?Bytes\s+"
                         r"([\d.]+) (\w?)bits/sec(.*)$")
_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}



def _freeze(container: Any) -> None:
    """`docker pause`, unless it is paused already (a resumed run finds the nodes the
    dead run froze still frozen; Docker refuses to pause them twice)."""
    container.reload()
    if container.status != "paused":
        container.pause()


class Job:
    """A command in one component, read line by line on a thread; `stop` kills it."""

    def __init__(self, session: CaSession, node: str, component: str, command: list[str],
                 tag: str, on_line: Callable[[str, float], None]) -> None:
        self.session, self.node, self.component = session, node, component
        self.number = session.lab_node[node]
        self.pidfile = f"/tmp/nestednet-{tag}.pid"
        self.command = ["sh", "-c", f"echo $$ > {self.pidfile}; exec \"$@\"", "sh", *command]
        self.on_line = on_line
        self.exit_code: int | None = None
        self.error: str | None = None
        self.thread = threading.Thread(target=self._run, name=f"nestednet-{tag}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        lab = self.session.lab
        try:
            with lab.inner(self.number) as inner:
                child = lab.child(inner, self.component)
                exec_id = inner.api.exec_create(child.id, self.command, stdout=True,
                                                stderr=True)["Id"]
                pending = b""
                for chunk in inner.api.exec_start(exec_id, stream=True):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    now = time.time()
                    for line in lines:
                        self.on_line(line.decode("utf-8", "replace"), now)
                if pending:
                    self.on_line(pending.decode("utf-8", "replace"), time.time())
                self.exit_code = inner.api.exec_inspect(exec_id).get("ExitCode")
        except Exception as exc:  # reported as an event by the owner
            self.error = str(exc)
            log.warning("job in %s %s failed: %s", self.node, self.component, exc)

    def stop(self, wait: float = 5.0) -> None:
        if self.thread.is_alive():
            lab = self.session.lab
            with contextlib.suppress(Exception), lab.inner(self.number) as inner:
                child = lab.child(inner, self.component)
                # The command and its children (ping restarted by its loop) go together.
                child.exec_run(["sh", "-c", f"p=$(cat {self.pidfile}); "
                                "kill $p $(pgrep -P $p) 2>/dev/null"])
        self.thread.join(wait)


class ActionPlayer:
    """Plays one run's action cues; see the module docstring."""

    def __init__(self, scenario: Scenario, session: CaSession, run_dir: Path, *,
                 speed: float = 1.0) -> None:
        self.scenario = scenario
        self.session = session
        self.run_dir = run_dir
        self.speed = speed
        self.cues: list[Cue] = timeline(scenario.actions, scenario.duration)
        self.actions: dict[int, Action] = {a.index: a for a in scenario.actions}
        self.cuts: dict[str, Cut] = {}
        self.frozen: dict[str, Callable[[], None]] = {}
        self.jobs: dict[int, list[Job]] = {}
        self._jobs_lock = threading.Lock()
        self.captures: dict[int, Capture] = {}
        self.t0_wall = time.time()
        self.errors = 0

    # --- the player's hooks ----------------------------------------------------------

    def begin(self, t0_wall: float) -> None:
        """When scenario time 0 is (wall clock), for the measurements' own timestamps."""
        self.t0_wall = t0_wall

    def visible(self, pairs: frozenset[Pair]) -> frozenset[Pair]:
        """A step's visible pairs with the active cuts taken out."""
        return effective_visible(pairs, self.cuts.values()) if self.cuts else pairs

    def play(self, cue: Cue, scenario_time: float) -> None:
        action = self.actions[cue.index]
        try:
            details = getattr(self, "_" + cue.op)(cue, action, scenario_time) or {}
            self._event(action, cue.op, scenario_time, key=cue.key, **details)
        except Exception as exc:
            self.errors += 1
            log.warning("%s %s failed: %s", action.label, cue.op, exc)
            self._event(action, cue.op, scenario_time, key=cue.key, error=str(exc))

    def resume(self, scenario_time: float) -> None:
        """A resumed run starts at ``scenario_time`` and never plays the cues before it:
        the faults still in effect then (model.actions.in_effect) are applied again,
        before the step in effect is. Cuts filter that step; a crashed node, still
        frozen since the dead run froze it, is frozen if it is not and thawed at its
        restart cue (or on close); a degrade scales the links the step keeps. Each is an
        ``action`` event with ``reapplied: true``."""
        for cue in in_effect(self.cues, scenario_time):
            action = self.actions[cue.index]
            try:
                if cue.op == "cut":
                    assert cue.cut is not None
                    self.cuts[cue.key] = cue.cut
                    details: dict = {}
                elif cue.op == "crash":
                    details = self._crash(cue, action, scenario_time)
                else:  # degrade: the step applied next shapes with the factor
                    details = self._set_factor(action)
                self._event(action, cue.op, scenario_time, key=cue.key, reapplied=True,
                            **details)
            except Exception as exc:
                self.errors += 1
                log.warning("%s %s (again, on resuming) failed: %s", action.label, cue.op,
                            exc)
                self._event(action, cue.op, scenario_time, key=cue.key, reapplied=True,
                            error=str(exc))

    def close(self) -> None:
        """Stop every job and thaw everything frozen (end, Ctrl-C or error alike)."""
        with self._jobs_lock:
            held = list(self.jobs.values())
            self.jobs.clear()
        for jobs in held:
            for job in jobs:
                job.stop()
        for running in self.captures.values():
            running.stop()
        self.captures.clear()
        for key, thaw in list(self.frozen.items()):
            try:
                thaw()
            except Exception as exc:
                log.warning("could not thaw %s: %s", key, exc)
        self.frozen.clear()

    # --- events ----------------------------------------------------------------------

    def scenario_time(self, wall: float) -> float:
        return round((wall - self.t0_wall) * self.speed, 6)

    def _event(self, action: Action, op: str, scenario_time: float, **fields: Any) -> None:
        nodes = [n for n in (action.get("node"), action.get("src"), action.get("dst"))
                 if n] or list(action.get("between") or action.get("nodes") or [])
        self.session.events.write(ev.ACTION, scenario_time=scenario_time,
                                  step=self.session.ca.progress.step, nodes=nodes,
                                  action=action.kind, op=op, index=action.index, **fields)

    # --- cuts ------------------------------------------------------------------------

    def _reapply(self, scenario_time: float) -> int:
        """The current step's visibility, filtered by the cuts, to the CA; links left."""
        ca = self.session.ca
        step = ca.progress.step
        if step < 0:
            return 0
        pairs = sorted(self.visible(self.scenario.steps[step].visible))
        self.session.server.call(lambda: ca.override_visibility(pairs, scenario_time), 30)
        return len(pairs)

    def _cut(self, cue: Cue, action: Action, t: float) -> dict:
        assert cue.cut is not None
        self.cuts[cue.key] = cue.cut
        return {"visible_after": self._reapply(t)}

    def _uncut(self, cue: Cue, action: Action, t: float) -> dict:
        self.cuts.pop(cue.key, None)
        return {"visible_after": self._reapply(t)}

    # --- crash and restart -------------------------------------------------------------

    def _crash(self, cue: Cue, action: Action, _t: float) -> dict:
        assert cue.target is not None
        node, component = cue.target
        lab, number = self.session.lab, self.session.lab_node[node]
        if component is None:
            parent = lab.parent(number)
            _freeze(parent)
            self.frozen[cue.key] = parent.unpause
        else:
            with lab.inner(number) as inner:
                _freeze(lab.child(inner, component))

            def thaw() -> None:
                with lab.inner(number) as inner:
                    lab.child(inner, component).unpause()

            self.frozen[cue.key] = thaw
        return {"target": node if component is None else f"{node}:{component}"}

    def _restart(self, cue: Cue, action: Action, _t: float) -> dict:
        thaw = self.frozen.pop(cue.key, None)
        if thaw is not None:
            thaw()
        assert cue.target is not None
        node, component = cue.target
        return {"target": node if component is None else f"{node}:{component}"}

    # --- degrade ---------------------------------------------------------------------

    def _degrade(self, cue: Cue, action: Action, t: float) -> dict:
        return self._scale(action, float(action.get("factor")), t)

    def _undegrade(self, cue: Cue, action: Action, t: float) -> dict:
        return self._scale(action, None, t)

    def _set_factor(self, action: Action) -> dict:
        """A degrade's factor on its pair, links left as they are (a resumed run: its
        first step shapes them)."""
        shaping = self.session.shaping
        if shaping is None:
            raise RuntimeError("degrade: this run shapes no link")
        factor = float(action.get("factor"))
        key = frozenset(action.get("between"))
        self.session.server.call(lambda: shaping.factors.update({key: factor}), 30)
        return {"factor": factor}

    def _scale(self, action: Action, factor: float | None, t: float) -> dict:
        shaping = self.session.shaping
        if shaping is None:
            raise RuntimeError("degrade: this run shapes no link")
        key = frozenset(action.get("between"))
        ca = self.session.ca

        def apply() -> None:
            if factor is None:
                shaping.factors.pop(key, None)
            else:
                shaping.factors[key] = factor
            ca.refresh_shaping(t)

        self.session.server.call(apply, 30)
        return {"factor": factor}

    # --- exec, ping, iperf, capture ----------------------------------------------------

    def _start(self, cue: Cue, action: Action, t: float) -> dict:
        return getattr(self, "_start_" + action.kind)(action, t)

    def _stop(self, cue: Cue, action: Action, _t: float) -> dict:
        if action.kind == "capture":
            running = self.captures.pop(action.index)
            return {"packets": running.stop(), "file": str(running.path)}
        with self._jobs_lock:
            jobs = self.jobs.pop(action.index, [])
        for job in reversed(jobs):
            job.stop()
        return {"exit_codes": [job.exit_code for job in jobs],
                "errors": [job.error for job in jobs if job.error]}

    def address(self, node: str) -> str:
        return self.session.directory()[node]["address"]

    def _start_exec(self, action: Action, _t: float) -> dict:
        node, component = action.get("node"), action.get("component", "gnab")
        out = self.run_dir / f"exec-{action.index}-{node}-{component}.log"
        handle = out.open("a", buffering=1)

        def write(line: str, wall: float) -> None:
            handle.write(f"{self.scenario_time(wall):.3f} {line}\n")

        job = Job(self.session, node, component, list(action.get("command")),
                  f"a{action.index}", write)
        self.jobs[action.index] = [job]
        threading.Thread(target=lambda: (job.thread.join(), handle.close()),
                         daemon=True).start()
        return {"output": str(out), "command": shlex.join(action.get("command"))}

    def _start_ping(self, action: Action, _t: float) -> dict:
        src, dst = action.get("src"), action.get("dst")
        interval = float(action.get("interval", DEFAULT_PING_INTERVAL))
        real = max(0.002, interval / self.speed)
        seen: set[tuple[int, int]] = set()
        generation = [0]
        session, index = self.session, action.index

        def line(text: str, wall: float) -> None:
            if text.startswith("PING "):
                generation[0] += 1  # started again: its icmp_seq counts from 1 again
                return
            reply, lost = _PING_REPLY.match(text), _PING_LOST.match(text)
            found = reply or lost
            if found is None:
                if "unreachable" in text.lower():  # could not even send: a probe lost
                    session.events.write(ev.PING, scenario_time=self.scenario_time(wall),
                                         step=session.ca.progress.step, nodes=[src, dst],
                                         index=index, seq=None, rtt_ms=None,
                                         error=text.strip())
                return
            seq = int(found.group(2))
            if (generation[0], seq) in seen:
                return
            seen.add((generation[0], seq))
            session.events.write(ev.PING, scenario_time=self.scenario_time(float(found.group(1))),
                                 step=session.ca.progress.step, nodes=[src, dst], index=index,
                                 seq=seq, rtt_ms=float(reply.group(3)) if reply else None)

        # ping exits when it cannot send its first probe (no route yet): start it again.
        command = ["sh", "-c", f"while :; do ping -n -D -O -i {real:.3f} -W 1 -I "
                   f"{self.address(src)} {self.address(dst)}; sleep {real:.3f}; done"]
        self.jobs[index] = [Job(session, src, "gnab", command, f"a{index}", line)]
        return {"interval": interval, "dst_address": self.address(dst)}

    def _start_capture(self, action: Action, _t: float) -> dict:
        spec = f"{action.get('node')}:{action.get('component')}"
        names = lab_capture.ports(self.session.lab, [spec])
        path = self.run_dir / action.get("file", f"capture-{action.index}.pcapng")
        self.captures[action.index] = Capture(
            names, path, lab_capture.scenario_comment(self.t0_wall, self.speed))
        return {"file": str(path), "port": next(iter(names))}

    def _start_iperf(self, action: Action, _t: float) -> dict:
        """iperf3 from ``src`` to ``dst``'s node address; the intervals recorded are the
        server's (what arrived), since a TCP sender counts what its socket buffer took.

        The client starts when the server prints that it listens, not after a fixed
        pause: `docker exec` through a node's inner engine took longer than 0.3 s on a
        loaded machine, and the client then met "Connection refused". The cue itself
        returns at once; a stop cue (or close) before the server listens means no client."""
        src, dst = action.get("src"), action.get("dst")
        port = IPERF_BASE_PORT + action.index
        seconds = float(action.get("duration")) / self.speed
        protocol = action.get("protocol", "tcp")
        session, index = self.session, action.index
        started = {"wall": time.time()}
        jobs: list[Job] = []

        def error(text: str, wall: float) -> None:
            session.events.write(ev.IPERF, scenario_time=self.scenario_time(wall),
                                 step=session.ca.progress.step, nodes=[src, dst],
                                 index=index, error=text.strip())

        def server_line(text: str, wall: float) -> None:
            if text.startswith(_IPERF_LISTENING):
                start_client()
                return
            found = _IPERF_LINE.match(text)
            if found is None:
                if "error" in text.lower():
                    error(text, wall)
                return
            begin, end = float(found.group(1)), float(found.group(2))
            bps = float(found.group(3)) * _UNITS[found.group(4)]
            tail = found.group(5)
            t0 = self.scenario_time(started["wall"])
            fields: dict[str, Any] = {}
            if "sender" in tail or "receiver" in tail:
                fields["summary"] = "sender" if "sender" in tail else "receiver"
            session.events.write(
                ev.IPERF, scenario_time=self.scenario_time(started["wall"] + end),
                step=session.ca.progress.step, nodes=[src, dst], index=index,
                protocol=protocol, interval=[round(t0 + begin * self.speed, 3),
                                             round(t0 + end * self.speed, 3)],
                bps=bps, **fields)

        def client_line(text: str, wall: float) -> None:
            if "error" in text.lower():
                error(text, wall)

        command = ["iperf3", "-c", self.address(dst), "-B", self.address(src), "-p", str(port),
                   "-t", f"{seconds:g}", "-i", "1", "-f", "k", "--forceflush",
                   "--connect-timeout", "3000"]
        if protocol == "udp":
            command += ["-u", "-b", action.get("rate", "1M")]

        def start_client() -> None:
            with self._jobs_lock:
                if self.jobs.get(index) is not jobs or len(jobs) > 1:
                    return
                started["wall"] = time.time()
                jobs.append(Job(session, src, "gnab", command, f"a{index}c", client_line))

        with self._jobs_lock:
            self.jobs[index] = jobs
            jobs.append(Job(session, dst, "gnab", ["iperf3", "-s", "-1", "-B",
                                                   self.address(dst), "-p", str(port), "-i",
                                                   "1", "-f", "k", "--forceflush"],
                            f"a{index}s", server_line))
        return {"port": port, "protocol": protocol, "dst_address": self.address(dst)}
