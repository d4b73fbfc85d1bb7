"""NestedNet: a nested-container emulator for hierarchical software-defined networks."""

__version__ = "0.1.0"

LABEL_PREFIX = "org.nestednet"
"""Every Docker object NestedNet creates carries labels under this prefix."""
