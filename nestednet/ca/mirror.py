"""The CA's copy of each agent's state: which requests are on their way to it.

An agent's requests follow from the messages the CA sent it, in the order it sent
them (AgentState.react is deterministic). Feeding a copy of AgentState every message
the CA sends a node therefore tells the CA, the moment it sends e.g. a STEP, which
LINK_REQs that node will answer with, before they arrive. The CA uses it to choose
which of a destination's free iPHYs an incoming link takes, and to hold a request
that would take the iPHY the destination is about to ask from (CommunicationAssistant).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from nestednet.agent.gnab import AgentState

PREDICTION_TTL_S = 0.5
"""A predicted request that has not arrived by then is taken as not coming (a copy
that drifted, e.g. an agent that polled an iPHY down), so it stops steering choices."""


class AgentMirror:
    """One agent's state as the CA's messages made it; fed by ``sent`` and ``arrived``."""

    def __init__(self, node: str, iphys_up: dict[str, bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state = AgentState(node=node, iphys_up=dict(iphys_up))
        self._clock = clock
        self._ids = itertools.count(-1, -1)
        self._predicted_at: dict[int, float] = {}
        """Provisional (negative) req_id -> when the request was predicted."""
        self._decided: set[int] = set()
        """Requests the CA has decided but not answered yet: still pending for the agent
        (the copy must react as it will), but no longer asking for anything."""

    def sent(self, message: dict) -> None:
        """The CA has just sent ``message`` to this agent."""
        now = self._clock()
        for peer, iphy in self.state.react(message):
            req_id = next(self._ids)
            self.state.pending[req_id] = (peer, iphy)
            self._predicted_at[req_id] = now
        self._predicted_at = {r: t for r, t in self._predicted_at.items()
                              if r in self.state.pending}
        self._decided &= set(self.state.pending)

    def decided(self, req_id: int) -> None:
        """The CA has decided request ``req_id``; its answer goes out soon."""
        if req_id in self.state.pending:
            self._decided.add(req_id)

    def arrived(self, req_id: int, peer: str, iphy: str) -> None:
        """The agent's request ``req_id`` has reached the CA: it replaces its prediction
        (or any prediction it contradicts: same peer or same iPHY)."""
        pending = self.state.pending
        for rid in [r for r, (pr, ip) in pending.items()
                    if r in self._predicted_at and (pr == peer or ip == iphy)]:
            del pending[rid]
            del self._predicted_at[rid]
        pending[req_id] = (peer, iphy)

    def asking(self) -> dict[str, str]:
        """iPHY -> peer for this agent's requests the CA has not answered: arrived ones and
        predicted ones still on their way (stale predictions dropped)."""
        expired = self._clock() - PREDICTION_TTL_S
        for rid in [r for r, t in self._predicted_at.items() if t < expired]:
            self.state.pending.pop(rid, None)
            del self._predicted_at[rid]
        return {iphy: peer for r, (peer, iphy) in self.state.pending.items()
                if r not in self._decided}

    def on_the_way(self) -> dict[str, str]:
        """iPHY -> peer for the predicted requests only (not arrived yet)."""
        self.asking()
        return {self.state.pending[r][1]: self.state.pending[r][0] for r in self._predicted_at}
