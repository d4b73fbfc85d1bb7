"""The per-host helper of multi-host labs (issue #16, docs/multihost.md section 5a).

A lab's hosts are reached from the CLI machine over the network only. The control path
(OVSDB, OpenFlow) already was; this helper carries the rest: the netlink work in the
host's namespaces (tunnels, control bridge, the veths of wiring, tc on host ports, their
removal), the parents' state files, the unix sockets under the state directory (inner
engines' docker.sock, nodes' OVSDB db.sock) and the route watch of `run`. It runs on
every host as a Docker Swarm global service (`nestednet hosts prepare`), listens on the
host's address with TLS (the hosts file's PKI) and runs NestedNet's own adapters there:

- `protocol`: pure: frames, requests, their validation (what a client may ask);
- `server`: the helper itself (`python -m nestednet.hostd`);
- `client`: the CLI's side: one persistent connection per host per command, batches,
  unix-socket forwards and route streams;
- `service`: the global service, made and removed through the swarm's manager.
"""
