"""Real orbits: TLE files, Walker-delta shells, ground stations, propagated with SGP4.

A layer of its own between the pure model and the command line: it may import the
model, the standard library and the orbit libraries (sgp4, skyfield, numpy), and
nothing with side effects (tests/unit/test_import_graph.py holds it to that).
"""
