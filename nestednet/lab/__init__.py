"""The runtime of a lab: create, inspect, change and delete the real thing."""
