"""What this machine can do, measured rather than assumed.

One package answers every "can we?" question, so `nestednet doctor` and the code
paths that act on the answers never disagree. Each probe does the real thing in a
scratch space of its own (a throwaway container, a scratch network namespace) and
removes it again.

- `check`: `Check`, one line of the report.
- `nodes`: what building nodes needs: root, Docker engine, --privileged or the
  explicit capability set, cgroups, Open vSwitch and its datapath.
- `shaping`: what linkemu (and any tc shaping) needs: qdisc kinds, the os-ken router.
- `vm`: the full-kernel VM for kernel tests: a kernel with the modules, virtme-ng.
- `report`: every check in order (`nestednet doctor`), and whether create can work.
- `__main__`: `python -m nestednet.capabilities vm-kernel|missing-kernel-features`,
  for scripts/kernel-vm and scripts/test.
"""
