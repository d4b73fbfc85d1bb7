"""The communication assistant: negotiates inter-node links with the GNAB agents."""
