"""The communication assistant: negotiates inter-node links with the GNAB agents.

- `assistant`: its decisions (sessions, visibility steps, link requests).
- `server`: the JSON-lines TCP server the agents talk to.
- `flows`: decisions made real as flow pairs on the main bridge.
- `player`: a scenario's steps played in real time.
- `session`: `nestednet run`, all of the above around one lab.
"""
