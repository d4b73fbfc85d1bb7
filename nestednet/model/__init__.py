"""Pure models: lab shapes, names, addresses, scenarios, link rules. No side effects."""
