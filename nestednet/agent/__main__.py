"""`python3 -m nestednet.agent`: the GNAB agent, configured from the environment.

NESTEDNET_NODE (n3), NESTEDNET_CA (host:port), NESTEDNET_IPHYS
(iphy1=192.168.0.11,...), NESTEDNET_POLL_S (default 2; 0 = no polling),
NESTEDNET_AGENT_STATE (state file, default /run/nestednet/agent.json).
"""

import signal
import sys

from nestednet.agent.gnab import Agent, AgentConfig

try:
    config = AgentConfig.from_env()
except (KeyError, ValueError) as exc:
    sys.exit(f"nestednet agent: bad or missing configuration: {exc}")
agent = Agent(config)
signal.signal(signal.SIGTERM, lambda *_: agent.stop())
signal.signal(signal.SIGINT, lambda *_: agent.stop())
agent.run()
