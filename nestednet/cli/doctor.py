"""`nestednet doctor`: the capability report."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from nestednet.console import out_console, print_json
from nestednet.errors import ExitStatus


def register(group: click.Group) -> None:
    group.add_command(doctor)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--hosts", "hosts_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Check every host of a hosts file instead (engine, swarm, "
                                 "address, seccomp, parent image, clock, OVS).")
def doctor(as_json: bool, hosts_file: Path | None) -> None:
    """Report what this machine can do (Docker, cgroups, OVS, qdiscs, router, VM).

    Each line is OK or MISSING with the fix. Exit status 0 when everything
    `nestednet create` needs is there, 1 otherwise. With --hosts FILE, the same for
    every host of a multi-host lab (docs/multihost.md).
    """
    # Lazy: the docker SDK and python-ovs would add start-up time to every command.
    from nestednet import images
    from nestednet.capabilities.report import ready_for_create, report

    if hosts_file is not None:
        # Lazy: the hosts' checks are needed only with --hosts.
        from nestednet.capabilities.hosts import helper_check, host_checks
        from nestednet.model.placement import load_hosts

        hostset = load_hosts(hosts_file)
        checks = [c for h in hostset.hosts
                  for c in [*host_checks(h, images.DIND_IMAGE, tls=hostset.ssl),
                            helper_check(h, hostset)]]
    else:
        checks = report(images.probe_image())
    ready = ready_for_create(checks)
    if as_json:
        print_json({"ready_for_create": ready, "checks": [c.as_dict() for c in checks]})
    else:
        width = max(len(c.name) for c in checks)
        for c in checks:
            status = "[green]OK     [/]" if c.ok else "[red]MISSING[/]"
            out_console.print(f"{status}  {c.name:<{width}}  {c.detail}", soft_wrap=True)
            if c.fix:
                out_console.print(f"         {'':<{width}}  fix: {c.fix}", soft_wrap=True)
        subject = "every host ready" if hosts_file is not None else "ready"
        verdict = (f"{subject} for `nestednet create`" if ready
                   else f"NOT {subject} for `nestednet create`")
        out_console.print(f"\n{verdict}")
    sys.exit(ExitStatus.OK if ready else ExitStatus.FAILURE)

