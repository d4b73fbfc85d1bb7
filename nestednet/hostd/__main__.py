"""`python -m nestednet.hostd`: the per-host helper (nestednet.hostd.server).

Started by the Swarm global service `nestednet hosts prepare` makes; by hand only for
debugging. Exit 2 on bad arguments (plain TCP without `--insecure` among them), 1 when
it cannot listen or read its TLS files.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import socket
import ssl
import sys
from pathlib import Path

from nestednet.hostd.server import Helper, Limits, Server, server_context


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nestednet.hostd",
                                     description="NestedNet's per-host helper (issue #16)")
    parser.add_argument("--listen", help="the host's underlay address")
    parser.add_argument("--listen-map", metavar="HOST=ADDR,...",
                        help="addresses by Swarm node hostname ($NESTEDNET_HOSTD_NODE, else "
                             "this host's name): one command for every task of a global "
                             "service")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state-dir", type=Path, required=True,
                        help="the host's state directory (parents' directories), same path "
                             "as on the host")
    parser.add_argument("--proc", default="/proc", help="where the host's /proc is mounted")
    parser.add_argument("--cgroup", default="/sys/fs/cgroup",
                        help="where the host's /sys/fs/cgroup is mounted")
    parser.add_argument("--idle-timeout", type=float, default=Limits.idle_timeout,
                        help="seconds a connection may wait between requests (default "
                             "%(default)s)")
    tls = parser.add_argument_group("TLS (all three, or --insecure)")
    tls.add_argument("--private-key")
    tls.add_argument("--certificate")
    tls.add_argument("--ca-cert", help="the CA that signed the clients' certificates")
    tls.add_argument("--insecure", action="store_true",
                     help="plain TCP with no authentication: anyone who reaches the port "
                          "acts as root on this host's labs (hosts files with "
                          "`\"insecure\": true` only)")
    args = parser.parse_args(argv)
    files = (args.private_key, args.certificate, args.ca_cert)
    if args.insecure == any(files) or (not args.insecure and not all(files)):
        parser.error("give --private-key, --certificate and --ca-cert (TLS with client "
                     "certificates); plain TCP only with --insecure")
    if args.idle_timeout <= 0:
        parser.error("--idle-timeout must be above 0")
    address = args.listen
    if args.listen_map:
        pairs = dict(item.split("=", 1) for item in args.listen_map.split(",") if "=" in item)
        me = os.environ.get("NESTEDNET_HOSTD_NODE") or socket.gethostname()
        address = pairs.get(me)
        if address is None:
            print(f"error: host {me} is not in --listen-map ({', '.join(pairs)})",
                  file=sys.stderr)
            return 1
    if not address:
        parser.error("give --listen or --listen-map")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    _more_files()
    try:
        context = None if args.insecure else server_context(*files)
        helper = Helper(args.state_dir, args.proc, args.cgroup,
                        labs_file=args.state_dir / "hostd" / f"labs-{args.port}.json")
        server = Server(helper, address, args.port, context,
                        Limits(idle_timeout=args.idle_timeout))
    except (OSError, ssl.SSLError) as exc:
        print(f"error: cannot serve on {address}:{args.port}: {exc}", file=sys.stderr)
        return 1
    logging.info("serving on %s:%d (%s)", address, args.port,
                 "plain TCP, INSECURE" if context is None
                 else "TLS, client certificates required")
    server.serve_forever()
    return 0


def _more_files() -> None:
    """Room for the connection cap (a forward holds two descriptors, a route watch one
    per node): the soft limit raised to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


if __name__ == "__main__":
    sys.exit(main())
