"""Thin adapters over the outside world, with errors a user can act on.

- `docker_engine`: the Docker SDK (connecting, starting containers).
- `ovsdb`: OVSDB through ovsdbapp (bridges, ports).
- `openflow`: flows on a bridge (ovs-ofctl batches, an os-ken OpenFlow channel).
- `os_ken_compat`: the one place os-ken 1.4.1 is made to run on Python 3.11.
- `netlink`: pyroute2 (namespaces, veths, addresses, sysctls).
- `netns_exec`: running a program inside a namespace we created.
- `tc`: the shaping library's executor (nestednet.model.tcplan over netlink).
"""
