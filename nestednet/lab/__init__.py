"""The runtime of a lab: create, inspect, change and delete the real thing.

- `create`: the one create skeleton for every node design (or roll back).
- `design`: the `NodeDesign` interface and what designs share (request, phase clock,
  labels, status helpers); `designs`: the designs by name, and from a lab's record.
- `nested`, `flat`: the two node designs (Docker-in-Docker parent with child
  containers; one container with processes, the Containernet baseline).
- `node_image`, `wiring`: a nested node's inner image and its components' veths.
- `nodes`: reaching an existing lab (`Lab`); `status`, `components`: status, exec, swap.
- `links`: inter-node links as flow pairs on the main bridge.
- `record`, `teardown`: the on-disk record of every resource, delete and cleanup.
"""
