"""The live view's web server: one page, its scripts, a JSON API and an event stream.

Starlette serves, uvicorn runs it; the page gets the whole picture as a snapshot
(nestednet.view.state) over server-sent events whenever it changed, at most
``MAX_RATE`` times a second, so a burst of a thousand events costs the browser a few
redraws. Replaying a finished step asks for that step's snapshot. plotly.js is served
from the `plotly` package's own copy, so the page works with no internet. Nothing
here reads a lab: `Source` (nestednet.view.source) does, and this module imports no
Docker or OVS code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from nestednet.errors import EnvironmentProblem, NestedNetError, UsageError
from nestednet.view import access, state
from nestednet.view.source import Source

STATIC = resources.files("nestednet.view") / "static"
POLL_S = 0.2
"""How often new events are read."""
LINKS_POLL_S = 0.5
"""How often a lab's flow table is read (a `link add` shows within about this)."""
MAX_RATE = 5.0
"""Snapshots per second at most, per page."""
HEARTBEAT_S = 15.0


def plotly_js() -> Path:
    """plotly.js as the plotly wheel bundles it (no CDN)."""
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise EnvironmentProblem(f"{path}: plotly's bundled plotly.min.js is missing",
                                 hint="reinstall NestedNet (pip install -e .)")
    return path


class Hub:
    """The source, the live state, and every event so far (for replay)."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.live = source.make_state()
        self.history: list[Any] = []
        self._cached: tuple[int, bytes] | None = None
        self.changed = asyncio.Event()
        self.polls = 0
        self.poll_errors: list[str] = []
        self.generation = source.generation

    def step_times(self) -> list[dict[str, Any]]:
        return [{"step": e.step, "time": e.scenario_time} for e in self.history
                if e.event == "step" and e.step is not None]

    def snapshot_bytes(self) -> bytes:
        """The live snapshot as JSON, made once per change whatever the number of pages."""
        if self._cached is None or self._cached[0] != self.live.version:
            snap = self.live.snapshot()
            snap["live"] = self.source.live()
            snap["steps_seen"] = self.step_times()
            self._cached = (self.live.version, json.dumps(snap).encode())
        return self._cached[1]

    def snapshot_at(self, step: int) -> dict[str, Any]:
        replayed = state.replay(self.history, step, self.source.make_state)
        snap = replayed.snapshot()
        snap["live"] = False
        snap["steps_seen"] = self.step_times()
        return snap

    def read_source(self, links: bool) -> tuple[int, list[Any], list[Any] | None]:
        """One read of the source (in a worker thread: a lab's reads block)."""
        new = self.source.read_events()
        return self.source.generation, new, self.source.links_now() if links else None

    def take(self, generation: int, new: list[Any], found: list[Any] | None) -> None:
        """Apply a read, on the event loop's thread: the only one that changes the state."""
        if generation != self.generation:
            self.generation = generation
            version = self.live.version
            self.live = self.source.make_state()
            self.live.version = version + 1
            self.history = []
        self.history += new
        self.live.apply(new)
        if found is not None:
            self.live.set_links(found)
        self.polls += 1

    def frozen(self) -> state.ViewState:
        """A copy of the live state for a worker thread (details) to read while the loop
        goes on changing the original."""
        copy = state.ViewState(self.live.nodes, title=self.live.title, kind=self.live.kind,
                               scenario=self.live.scenario,
                               scenario_links=self.live.scenario_links)
        copy.step, copy.time, copy.visible = self.live.step, self.live.time, self.live.visible
        copy.positions = dict(self.live.positions)
        copy.links = dict(self.live.links)
        return copy

    async def run(self) -> None:
        last_links = 0.0
        while True:
            now = time.monotonic()
            links = now - last_links >= LINKS_POLL_S
            if links:
                last_links = now
            before = self.live.version
            try:
                self.take(*await asyncio.to_thread(self.read_source, links))
            except NestedNetError as exc:
                self._note(str(exc))
            except Exception as exc:
                self._note(f"{type(exc).__name__}: {exc}")
            if self.live.version != before:
                self.changed.set()
                self.changed = asyncio.Event()
            await asyncio.sleep(POLL_S)

    def _note(self, message: str) -> None:
        if not self.poll_errors or self.poll_errors[-1] != message:
            self.poll_errors = [*self.poll_errors[-9:], message]


class Guard:
    """Every HTTP request passes the access rules (nestednet.view.access) first."""

    def __init__(self, app: ASGIApp, bind: str, token: str | None) -> None:
        self.app, self.bind, self.token = app, bind, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        headers = {k.lower(): v for k, v in request.headers.items()}
        refusal = None
        if not access.host_ok(headers.get("host"), self.bind):
            refusal = (400, "wrong Host header for a view bound to the loopback interface")
        elif not access.origin_ok(headers.get("origin"), headers.get("host")):
            refusal = (403, "requests from another origin are refused")
        elif not access.token_ok(access.token_given(dict(request.query_params), headers,
                                                    request.cookies), self.token):
            refusal = (401, "this view needs its token: open the URL `nestednet view` "
                            "printed (…/?token=T)")
        if refusal is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 4401})
                return
            await PlainTextResponse(refusal[1], status_code=refusal[0])(scope, receive, send)
            return
        await self.app(scope, receive, send)


def make_app(source: Source, *, bind: str = "127.0.0.1", token: str | None = None,
             hub: Hub | None = None) -> ASGIApp:
    hub = hub or Hub(source)

    async def index(request: Request) -> Response:
        if token is not None and "token" in request.query_params:
            # The token leaves the address bar for a cookie of this origin only.
            response: Response = RedirectResponse("/", status_code=303)
            response.set_cookie(access.COOKIE, token, httponly=True, samesite="strict")
            return response
        return Response((STATIC / "index.html").read_bytes(), media_type="text/html",
                        headers={"Cache-Control": "no-store"})

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return FileResponse(plotly_js(), media_type="text/javascript")
        files = {"view.js": "text/javascript", "view.css": "text/css"}
        if name not in files:
            return PlainTextResponse("not found", status_code=404)
        return Response((STATIC / name).read_bytes(), media_type=files[name],
                        headers={"Cache-Control": "no-store"})

    async def api_state(request: Request) -> Response:
        step = request.query_params.get("step")
        if step is None:
            return Response(hub.snapshot_bytes(), media_type="application/json")
        try:
            index = int(step)
        except ValueError:
            return JSONResponse({"error": f"step {step!r} is not a number"}, status_code=400)
        return JSONResponse(hub.snapshot_at(index))

    async def api_info(request: Request) -> Response:
        return JSONResponse({"kind": source.kind, "title": source.title,
                             "live": source.live(), "polls": hub.polls,
                             "errors": hub.poll_errors, "steps": hub.step_times()})

    async def api_node(request: Request) -> Response:
        name = request.query_params.get("name", "")
        frozen = hub.frozen()
        return await _details(lambda: source.node_details(name, frozen))

    async def api_link(request: Request) -> Response:
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        frozen = hub.frozen()
        return await _details(lambda: source.link_details(a, b, frozen))

    async def stream(request: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            sent = -1
            last = 0.0
            while not await request.is_disconnected():
                if hub.live.version != sent:
                    wait = 1 / MAX_RATE - (time.monotonic() - last)
                    if wait > 0:
                        await asyncio.sleep(wait)
                    sent = hub.live.version
                    last = time.monotonic()
                    yield b"event: state\ndata: " + hub.snapshot_bytes() + b"\n\n"
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(hub.changed.wait(), HEARTBEAT_S)
                    continue
                yield b": still here\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store",
                                          "X-Accel-Buffering": "no"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(hub.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    app = Starlette(routes=[
        Route("/", index), Route("/static/{name}", static), Route("/api/state", api_state),
        Route("/api/info", api_info), Route("/api/node", api_node),
        Route("/api/link", api_link), Route("/api/stream", stream)], lifespan=lifespan)
    return Guard(app, bind, token)


async def _details(read: Callable[[], dict[str, Any]]) -> Response:
    try:
        return JSONResponse(await asyncio.to_thread(read))
    except UsageError as exc:
        return JSONResponse({"error": str(exc)}, status_code=404)
    except Exception as exc:
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)


def listen(bind: str, port: int) -> socket.socket:
    """The listening socket, made here so a busy port is a clear error and port 0 works."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind.strip("[]") if bind != "localhost" else "127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise UsageError(f"--bind {bind} --port {port}: cannot listen there: {exc.strerror}",
                         hint="pick another --port (0: any free one)") from None
    sock.listen(64)
    sock.setblocking(False)
    return sock


def url(sock: socket.socket, bind: str, token: str | None) -> str:
    port = sock.getsockname()[1]
    host = f"[{bind.strip('[]')}]" if ":" in bind else bind
    return f"http://{host}:{port}/" + (f"?token={token}" if token else "")


def serve(source: Source, sock: socket.socket, *, bind: str, token: str | None) -> None:
    """Serve until Ctrl-C (uvicorn re-raises it once it has shut down)."""
    config = uvicorn.Config(make_app(source, bind=bind, token=token), log_level="warning",
                            timeout_graceful_shutdown=1, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
