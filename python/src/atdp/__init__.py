"""atdp for agents: trajectories of official-SDK calls through the atdp proxy, and rewards.

```python
import atdp
from openai import OpenAI

client = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="sk-atdp-demo-agent")
with atdp.trajectory(client) as run:
    run.client.chat.completions.create(model="gpt-4.1-mini", messages=[...])
with atdp.Rewards("http://127.0.0.1:8080", "sk-atdp-demo-agent") as rewards:
    rewards.for_trajectory(run.trajectory_id, "resolved", 1.0, terminal=True)
```

`atdp.TrajectoryEnv` makes each episode of a Gymnasium-style environment a trajectory whose
return is posted as a reward; `atdp.serve_env_command` makes such an environment a command
that `atdp-eval` and `atdp-loop`'s gate play. `atdp.lake` (the ``lake`` extra) reads the lake's steps and
rewards for your own trainer. The reference is docs/python.md.
"""

from atdp import errors
from atdp.command import RecordingClient, play_episode, serve_env_command
from atdp.env import Episode, TrajectoryEnv, run_episode
from atdp.errors import (
    AtdpError,
    AuthenticationError,
    InvalidRequestError,
    PolicyDeniedError,
    RateLimitedError,
    ServerError,
    UnavailableError,
    UnreachableError,
)
from atdp.rewards import AsyncRewards, Backoff, Recorded, Reward, Rewards
from atdp.trajectory import Trajectory, trajectory

__all__ = [
    "AsyncRewards",
    "AtdpError",
    "AuthenticationError",
    "Backoff",
    "Episode",
    "InvalidRequestError",
    "PolicyDeniedError",
    "RateLimitedError",
    "Recorded",
    "RecordingClient",
    "Reward",
    "Rewards",
    "ServerError",
    "Trajectory",
    "TrajectoryEnv",
    "UnavailableError",
    "UnreachableError",
    "errors",
    "play_episode",
    "run_episode",
    "serve_env_command",
    "trajectory",
]
