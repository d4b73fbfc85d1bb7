"""The shaping runtime: validate -> plan -> execute for `apply`, and `set`, `show`, `clear`.

What was applied is recorded in a state file (the links as a native document, the
shaper, whether leaves are netem) so `set` can address a link's class in place and
`show` can put configured values beside what the kernel reports.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, replace
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

from linkemu import linksfile, router, router_plan
from linkemu.model import DIRECTIONS, EmulatedLinks, Link, LinkShape
from nestednet.adapters import tc
from nestednet.adapters.files import private_dir, write_private
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.model import tcplan, units

STATE_DIR_ENV = "LINKEMU_STATE_DIR"
DEFAULT_STATE_DIR = "/var/lib/nestednet/linkemu"
DEFAULT_SHAPER = "htb"
"""HTB passes the head-of-line test and HFSC with a netem leaf does not (see README)."""


def state_path() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV, DEFAULT_STATE_DIR)) / "shaping.json"


@dataclass(frozen=True)
class Applied:
    """What linkemu installed: the links, the shaper and whether leaves are netem."""

    table: EmulatedLinks
    shaper: str
    netem: bool
    applied_at: float

    def as_dict(self) -> dict[str, Any]:
        return {"version": 1, "shaper": self.shaper, "netem": self.netem,
                "applied_at": self.applied_at, "links": linksfile.to_native(self.table)}


def load_state() -> Applied | None:
    path = state_path()
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        return Applied(table=linksfile.parse(data["links"]), shaper=data["shaper"],
                       netem=bool(data["netem"]), applied_at=float(data["applied_at"]))
    except (ValueError, KeyError, linksfile.LinksFileError) as exc:
        raise EnvironmentProblem(f"the shaping state file {path} is unreadable: {exc}",
                                 hint="`linkemu clear` cannot know the ports then; remove "
                                 "the file after checking the emulator ports") from exc


def save_state(applied: Applied) -> None:
    path = state_path()
    private_dir(path.parent)
    write_private(path, json.dumps(applied.as_dict(), indent=2))


def require_state() -> Applied:
    applied = load_state()
    if applied is None:
        raise UsageError("no links are applied", hint="run `linkemu apply FILE` first")
    return applied


# --- apply: validate -> plan -> execute ----------------------------------------------


@dataclass(frozen=True)
class ApplyPlan:
    """Both parts of `apply`: the router's addresses/routes (None: no router) and tc."""

    table: EmulatedLinks
    tc: tcplan.TcPlan
    router: router_plan.RouterPlan | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"links": linksfile.to_native(self.table),
                "router": self.router.as_dict() if self.router is not None else None,
                "tc": self.tc.as_dict()}


def validate(path: str | Path) -> EmulatedLinks:
    return linksfile.load(path)


def needs_netem(table: EmulatedLinks) -> bool:
    return any(tcplan.needs_netem(link.shape(d)) for link in table.links for d in DIRECTIONS)


def missing_modules(shaper: str, table: EmulatedLinks, qdiscs: dict[str, bool]) -> list[str]:
    """Kernel modules the plan needs and this kernel lacks (sch_hfsc, sch_netem, sch_htb)."""
    wanted = [shaper]
    if shaper == "hfsc" or needs_netem(table):
        wanted.append("netem")
    return [f"sch_{kind}" for kind in wanted if not qdiscs.get(kind, False)]


def tc_part(table: EmulatedLinks, shaper: str = DEFAULT_SHAPER,
            qdiscs: dict[str, bool] | None = None) -> tcplan.TcPlan:
    """The tc part of `apply` for ``table``.

    ``qdiscs`` is what the kernel offers (nestednet.capabilities.shaping.available_qdiscs()); None
    means "assume everything" (dry runs without root). Raises EnvironmentProblem
    naming the missing modules, before anything is touched.
    """
    if qdiscs is None:
        return table.tc_plan(shaper, netem=True)
    missing = missing_modules(shaper, table, qdiscs)
    if missing:
        why = []
        if "sch_netem" in missing and needs_netem(table):
            why.append("links with delay, jitter or loss need sch_netem")
        if shaper == "hfsc" and "sch_hfsc" in missing:
            why.append("--shaper hfsc needs sch_hfsc")
        hint = "run on a kernel with these modules (the tests use scripts/kernel-vm)"
        if "sch_htb" not in missing:
            hint += "; on this kernel `--shaper htb` works for links with a rate only"
        raise EnvironmentProblem(
            f"this kernel lacks {', '.join(missing)}: nothing was applied"
            + (f" ({'; '.join(why)})" if why else ""), hint=hint)
    return table.tc_plan(shaper, netem=qdiscs.get("netem", False))


def router_part(table: EmulatedLinks) -> router_plan.RouterPlan | None:
    """The router part of `apply`: addresses and routes for the REST router.

    An emulator inside a network namespace (``emulator.netns``) is plain ports that
    tc shapes, with no OVS router in front of it, so it has no router part.
    """
    if table.emulator.netns is not None:
        return None
    return router_plan.plan(table)


def check_router(plan: ApplyPlan) -> None:
    """Refuse, before anything changes, when the plan needs a router that is not there."""
    if plan.router is None:
        return
    try:
        state = router.running_state()
    except EnvironmentProblem as exc:
        raise UsageError(f"no router is running for bridge {plan.router.bridge}: the links "
                         "need one to route clients to the server; nothing was applied",
                         hint=exc.hint) from exc
    if state.bridge != plan.router.bridge:
        raise UsageError(f"the links are for bridge {plan.router.bridge} but the running "
                         f"router serves {state.bridge}; nothing was applied")


def plan_apply(table: EmulatedLinks, shaper: str = DEFAULT_SHAPER,
               qdiscs: dict[str, bool] | None = None) -> ApplyPlan:
    return ApplyPlan(table=table, tc=tc_part(table, shaper, qdiscs), router=router_part(table))


def execute(plan: ApplyPlan) -> Applied:
    """Install the plan: router and ports checked first, then the router configured
    (it restores its previous state itself if refused), then offloads off, then tc."""
    check_router(plan)
    previous = load_state()
    ours: list[str] = []
    moved = False
    if previous:
        emu = previous.table.emulator
        same_ns = emu.netns == plan.tc.netns
        ours = [emu.port_for(d) for d in DIRECTIONS] if same_ns else []
        moved = not same_ns or set(ours) != set(plan.tc.ports)
    tc.check_ports(plan.tc.netns, plan.tc.ports, ours)
    if moved:
        clear()  # the earlier apply shaped other ports: take its trees away, not orphan them
    if plan.router is not None:
        router.configure(plan.router)
    tc.disable_offloads(plan.tc.netns, plan.tc.ports)
    tc.apply(plan.tc.ops, plan.tc.netns, plan.tc.ports)
    applied = Applied(table=plan.table, shaper=plan.tc.shaper,
                      netem="netem" in plan.tc.requires, applied_at=time.time())
    save_state(applied)
    return applied


def apply_file(path: str | Path, shaper: str = DEFAULT_SHAPER) -> Applied:
    table = validate(path)
    return execute(plan_apply(table, shaper, available_qdiscs()))


# --- set ------------------------------------------------------------------------------


def find_link(table: EmulatedLinks, name: str) -> int:
    """Index of the link called ``name``: link name (R1-C2), unique client name, or client IP."""
    for i, link in enumerate(table.links):
        if link.name == name:
            return i
    by_client = [i for i, link in enumerate(table.links) if link.client == name]
    if len(by_client) == 1:
        return by_client[0]
    try:
        ip = IPv4Address(name)
    except ValueError:
        ip = None
    by_ip = [i for i, link in enumerate(table.links) if link.client_ip == ip]
    if len(by_ip) == 1:
        return by_ip[0]
    known = ", ".join(f"{link.name} ({link.client_ip})" for link in table.links)
    reason = ("is ambiguous" if len(by_client) > 1 or len(by_ip) > 1 else "is not a known link")
    raise UsageError(f"{name!r} {reason}; known links: {known}",
                     hint="name a link as ROUTER-CLIENT, e.g. " + table.links[0].name)


def directions(direction: str) -> tuple[str, ...]:
    if direction == "both":
        return DIRECTIONS
    if direction not in DIRECTIONS:
        raise UsageError(f"direction {direction!r} is not forward, backward or both")
    return (direction,)


def parse_changes(*, rate: str | None = None, delay: str | None = None,
                  jitter: str | None = None, loss: str | None = None) -> dict[str, Any]:
    """Option values -> LinkShape field changes; only the given ones."""
    changes: dict[str, Any] = {}
    for option, value, parse, fieldname in (
            ("--rate", rate, units.parse_rate, "rate_bps"),
            ("--delay", delay, units.parse_time, "delay_us"),
            ("--jitter", jitter, units.parse_time, "jitter_us"),
            ("--loss", loss, units.parse_loss, "loss_pct")):
        if value is None:
            continue
        try:
            changes[fieldname] = parse(value)
        except ValueError as exc:
            raise UsageError(f"{option} {value}: {exc}") from None
    return changes


@dataclass(frozen=True)
class Change:
    link: str
    direction: str
    old: LinkShape
    new: LinkShape

    def as_dict(self) -> dict[str, Any]:
        return {"link": self.link, "direction": self.direction,
                "old": describe(self.old), "new": describe(self.new)}


def describe(shape: LinkShape) -> dict[str, str]:
    return {"rate": units.format_rate(shape.rate_bps), "delay": units.format_time(shape.delay_us),
            "jitter": units.format_time(shape.jitter_us), "loss": units.format_loss(shape.loss_pct)}


def set_link(name: str, direction: str, changes: dict[str, Any]) -> list[Change]:
    """Change one link's shape in place (class rate, netem parameters); nothing else moves."""
    if not changes:
        raise UsageError("nothing to change", hint="give --rate, --delay, --jitter or --loss")
    applied = require_state()
    table = applied.table
    index = find_link(table, name)
    link = table.links[index]
    ops = []
    done = []
    new_link: Link = link
    for d in directions(direction):
        old = link.shape(d)
        new = old.with_changes(**changes)
        if new.jitter_us > new.delay_us:
            raise UsageError(f"{link.name} {d}: jitter {units.format_time(new.jitter_us)} is "
                             f"larger than the delay {units.format_time(new.delay_us)}")
        if not applied.netem and tcplan.needs_netem(new):
            raise EnvironmentProblem("the links were applied without netem (this kernel lacks "
                                     "sch_netem): only --rate can change")
        ops += table.change_ops(applied.shaper, index, d, new, netem=applied.netem)
        new_link = replace(new_link, **{d: new})
        done.append(Change(link.name, d, old, new))
    tc.change(ops, table.emulator.netns)
    links = list(table.links)
    links[index] = new_link
    save_state(replace(applied, table=replace(table, links=tuple(links))))
    return done


# --- show / clear ---------------------------------------------------------------------


def show() -> dict[str, Any]:
    """Configured values beside the kernel's, per link and direction."""
    applied = require_state()
    table = applied.table
    emu = table.emulator
    kernel = tc.read(emu.netns, [emu.port_for(d) for d in DIRECTIONS])
    rows = []
    for i, link in enumerate(table.links):
        for d in DIRECTIONS:
            port = kernel[emu.port_for(d)]
            classes = {c["classid"]: c for c in port.get("classes", [])}
            qdiscs = {q["handle"]: q for q in port.get("qdiscs", [])}
            filters = [f for f in port.get("filters", []) if f["target"] == tcplan.leaf_class(i)]
            cls = classes.get(tcplan.leaf_class(i), {})
            netem = qdiscs.get(tcplan.leaf_qdisc(i), {})
            shape = link.shape(d)
            actual = {"rate_bps": cls.get("rate_bps"), "delay_us": netem.get("delay_us"),
                      "jitter_us": netem.get("jitter_us"), "loss_pct": netem.get("loss_pct"),
                      "limit": netem.get("limit"),
                      "filter": ({"src": filters[0].get("src"), "dst": filters[0].get("dst")}
                                 if filters else None)}
            configured = {"rate_bps": shape.rate_bps, "delay_us": shape.delay_us,
                          "jitter_us": shape.jitter_us, "loss_pct": shape.loss_pct,
                          "limit": tcplan.netem_limit(shape) if applied.netem else None}
            match = (actual["rate_bps"] == configured["rate_bps"]
                     and (not applied.netem or (
                         actual["delay_us"] == configured["delay_us"]
                         and actual["jitter_us"] == configured["jitter_us"]
                         and actual["loss_pct"] is not None
                         and abs(actual["loss_pct"] - configured["loss_pct"]) < 1e-3))
                     and actual["filter"] is not None)
            rows.append({"link": link.name, "router": link.router, "client": link.client,
                         "client_ip": str(link.client_ip), "server_ip": str(link.server_ip),
                         "direction": d, "port": emu.port_for(d),
                         "class": tcplan.leaf_class(i), "configured": configured,
                         "kernel": actual, "in_sync": match})
    return {"shaper": applied.shaper, "netem": applied.netem, "applied_at": applied.applied_at,
            "emulator": {"bridge": emu.bridge, "client_port": emu.client_port,
                         "server_port": emu.server_port, "netns": emu.netns},
            "links": rows, "ports": kernel}


def clear() -> list[str]:
    """Remove linkemu's tc trees from the recorded ports, then forget them."""
    applied = load_state()
    if applied is None:
        return []
    emu = applied.table.emulator
    try:
        cleared = tc.remove(emu.netns, [emu.port_for(d) for d in DIRECTIONS])
    except EnvironmentProblem:
        if emu.netns is None or os.path.exists(os.path.join(tc.NETNS_DIR, emu.netns)):
            raise
        cleared = []
    state_path().unlink(missing_ok=True)
    return cleared
