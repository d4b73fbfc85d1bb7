"""`nestednet report`: one page per run from its events (series.py: what to draw, pure;
render.py: matplotlib figures and the Markdown or HTML page)."""
