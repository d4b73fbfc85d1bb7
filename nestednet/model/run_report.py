"""A run's summary figures as lines for a person (what `nestednet run` prints after its
step lines); the figures themselves come from nestednet.model.events."""

from __future__ import annotations

from nestednet.model.events import LATENCY_PHASES


def describe_routes(routing: str, routes: list) -> str:
    """One line for a person: route changes and convergence time per step."""
    if routing == "none":
        return "routing: none (route changes are recorded only with --routing direct|babel)"
    steps = "; ".join(f"step {r['step'] + 1}: {r['changes']}"
                      + (f" in {r['converged_s']:.1f} s" if r["converged_s"] is not None
                         else "") for r in routes)
    return f"route changes ({routing}): {steps or 'none'}"


def describe_host_flows(host_flows: dict) -> str | None:
    """One line for a person (labs over several hosts): flows in on all hosts, p50/p90."""
    parts = []
    for op, groups in host_flows.items():
        for kind, figures in groups.items():
            every, spread = figures["all_ms"], figures["spread_ms"]
            parts.append(f"{op} {kind.replace('_', '-')} x{figures['batches']}: all hosts "
                         f"{every['p50']:.1f}/{every['p90']:.1f} ms, spread "
                         f"{spread['p50']:.1f}/{spread['p90']:.1f} ms")
    return "flows per batch (p50/p90): " + "; ".join(parts) if parts else None


def describe_negotiation(negotiation: dict) -> str:
    """One line for a person: refusals by reason and link_up latency percentiles."""
    if not negotiation.get("requests"):
        return "link requests: none"
    reasons = ", ".join(f"{reason} {count}" for reason, count
                        in negotiation["refusals"].items()) or "none"
    latency = negotiation["link_up_latency_ms"]
    figures = ", ".join(f"{q} {latency[q]:.0f} ms" for q in ("p50", "p90", "p99")
                        if latency[q] is not None) or "no links made"
    phases = negotiation.get("latency_breakdown_ms", {})
    split = "; ".join(f"{name.replace('_', ' ')} {phases[name]['p50']:.1f}/"
                      f"{phases[name]['p99']:.1f}" for name in LATENCY_PHASES
                      if name in phases)
    return (f"link requests {negotiation['requests']}, refused {negotiation['refused']}: "
            f"{reasons}; request -> flows in: {figures}"
            + (f" (p50/p99 ms: {split})" if split else ""))


def describe_fidelity(fidelity: dict) -> str:
    """One line for a person: shaped directions whose kernel state matched the config."""
    line = (f"fidelity: {fidelity['matched']} of {fidelity['checks']} shaped directions "
            "matched what was configured at their step's end")
    if fidelity["mismatched"]:
        first = fidelity["mismatched"][0]
        line += (f"; e.g. step {first['checked_step'] + 1} port {first['port']}: "
                 f"{'; '.join(first['differences'])}")
    return line


def describe_actions(actions: dict) -> str:
    """One line for a person: cues played, and each ping's loss and iperf's throughput."""
    parts = [f"actions: {actions['cues']} cues played, {actions['failed']} failed"]
    for index, ping in actions["ping"].items():
        rtt = f", RTT p50 {ping['rtt_ms_p50']:.2f} ms" if ping["rtt_ms_p50"] is not None else ""
        parts.append(f"ping[{index}] {'-'.join(ping['nodes'])}: {ping['answered']}/"
                     f"{ping['probes']} answered ({ping['loss_pct']:g} % lost){rtt}")
    for index, iperf in actions["iperf"].items():
        mean = f"{iperf['mean_bps'] / 1e6:.1f} Mbit/s" if iperf["mean_bps"] else "no data"
        parts.append(f"iperf[{index}] {'-'.join(iperf['nodes'])}: {mean} over "
                     f"{iperf['intervals']} intervals")
    return "; ".join(parts)


def describe_path_delay(path_delay: dict) -> str:
    """One line for a person: per ping, its probes within the bound of the configured
    path RTT (model.path_delay), and the first step where they part, if any."""
    parts = []
    for ping in path_delay["pings"]:
        head = (f"ping[{ping['index']}] {'-'.join(ping['nodes'])}: "
                f"{ping['compared'] - ping['outside']} of {ping['compared']} compared probes "
                f"within bound of the configured path RTT")
        if ping["answered"] > ping["compared"]:
            head += f" ({ping['answered'] - ping['compared']} answered with no path known)"
        parted = [r for r in ping["steps"] if r["parts"]]
        if parted:
            first = parted[0]
            head += (f"; parts at step {first['step'] + 1} (from {first['from_s']:.1f} s): "
                     f"measured {first['measured_ms']:.2f} ms vs configured "
                     f"{first['configured_ms']:.2f} ms over {first['forward']} / "
                     f"{first['back']}" + (f", and {len(parted) - 1} more step(s)"
                                          if len(parted) > 1 else ""))
        elif ping["compared"]:
            head += "; agrees at every step"
        parts.append(head)
    return "path delay: " + "; ".join(parts)
