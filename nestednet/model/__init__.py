"""Pure models: plain values and the rules over them, no side effects."""
