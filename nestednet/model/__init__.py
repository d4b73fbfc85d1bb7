"""Pure description of labs: shapes, names, addresses and link rules. No side effects."""
