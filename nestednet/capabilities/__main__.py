"""`python -m nestednet.capabilities vm-kernel|missing-kernel-features`: for shell scripts.

`vm-kernel` prints the kernel scripts/kernel-vm boots (exit 1 when there is none);
`missing-kernel-features` prints what this kernel lacks for the kernel tests
(scripts/test then runs them in the VM).
"""

from __future__ import annotations

import sys

from nestednet.capabilities.nodes import ovs_datapath
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.capabilities.vm import vm_kernel
from nestednet.errors import ExitStatus

if sys.argv[1:] == ["vm-kernel"]:
    k = vm_kernel()
    print(k or "")
    sys.exit(ExitStatus.OK if k else ExitStatus.FAILURE)
if sys.argv[1:] == ["missing-kernel-features"]:
    q = available_qdiscs()
    missing = [f"sch_{k}" for k in ("netem", "hfsc") if not q[k]]
    if ovs_datapath() != "system":
        missing.append("openvswitch")
    print(" ".join(missing))
    sys.exit(ExitStatus.OK)
print("usage: python -m nestednet.capabilities vm-kernel|missing-kernel-features",
      file=sys.stderr)
sys.exit(ExitStatus.USAGE)
