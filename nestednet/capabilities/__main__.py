"""`python -m nestednet.capabilities vm-kernel|missing-kernel-features`: for shell scripts.

`vm-kernel` prints the kernel scripts/kernel-vm boots (exit 1, naming each missing
piece, when the VM cannot boot);
`missing-kernel-features` prints what this kernel lacks for the kernel tests
(scripts/test then runs them in the VM).
"""

from __future__ import annotations

import sys

from nestednet.capabilities.nodes import ovs_datapath
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.capabilities.vm import vm_kernel, vm_problems
from nestednet.errors import ExitStatus

if sys.argv[1:] == ["vm-kernel"]:
    # The kernel to boot, or every missing piece with its fix (one a line) and exit 1.
    problems = vm_problems()
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(ExitStatus.FAILURE)
    print(vm_kernel())
    sys.exit(ExitStatus.OK)
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
