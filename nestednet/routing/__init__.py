"""Routing inside the nodes: one strategy per protocol, picked with `--routing`.

A strategy says what a component needs to route (environment, a daemon to start
in it once it is wired); `nestednet.routing.strategies` names them. Nothing here
touches a lab: the node design starts what a strategy asks for.
"""
