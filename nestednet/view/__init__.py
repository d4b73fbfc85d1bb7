"""The live view in a browser: `nestednet view` (issue #29).

`source` reads a lab, a run or a scenario; `state` turns events into what the page
draws (pure); `access` holds the bind, token and origin rules; `server` serves the
page (starlette, uvicorn), its API and its event stream; `static/` is the page.
"""
