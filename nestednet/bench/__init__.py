"""`nestednet bench`: the NestedNet paper's evaluation, nested and flat side by side."""
