"""Episodes of a Gymnasium-style environment as trajectories through the proxy.

An environment is anything with Gymnasium's interface (`gymnasium.Env` or a class of your own;
Gymnasium itself is not needed):

    reset(*, seed=None, options=None) -> (observation, info)
    step(action) -> (observation, reward, terminated, truncated, info)

`TrajectoryEnv` wraps one so that each episode is one trajectory: `reset()` opens a new
trajectory on the agent's SDK client, the agent calls the model through `env.client` while it
chooses each action, and when the episode ends the episode's return is posted as a trajectory
reward (and, with `step_reward`, each environment step's reward on the model call that chose
its action), in one request with retries. `run_episode` plays one episode with an agent
function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, SupportsFloat, TypeVar

from atdp.rewards import Recorded, Reward, Rewards
from atdp.trajectory import Trajectory

ClientT = TypeVar("ClientT")

# Tags the adapter sets on every reward it posts.
_OWN_TAGS = ("env", "ended", "seed")


class Environment(Protocol):
    """Gymnasium's environment interface, as far as the adapter uses it."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]: ...

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]: ...


@dataclass
class Episode:
    """One finished episode: its trajectory, the steps its calls made, its return, how it
    ended, and the rewards recorded for it (empty until they were sent)."""

    trajectory_id: str
    step_ids: list[str]
    seed: int | None
    env_steps: int
    episode_return: float
    terminated: bool
    truncated: bool
    rewards: list[Recorded] = field(default_factory=list)


class TrajectoryEnv(Generic[ClientT]):
    """`env`, with every episode a trajectory of `client`'s calls and its return a reward.

    - `client`: the agent's synchronous SDK client (`OpenAI` or `Anthropic`); each episode's
      calls go through `env.client`, which joins the episode's trajectory.
    - `reward`: the name of the trajectory reward that carries the episode's return (the sum of
      the environment's rewards), `terminal` when the environment terminated the episode (not
      when it was truncated); tags `env` (`env_name`), `seed`, `ended` (`terminated` or
      `truncated`) and `tags`.
    - `step_reward`: when given, each environment step's reward is also posted under this name
      on the step of the last reply that arrived while its action was chosen (a step during
      which no reply arrived carries none). Weigh either name, not both, in training, or the
      step rewards count twice.

    The rewards of an episode are built once, with their `reward_id`s, and sent in one request
    when it ends. When that request fails (after `Rewards`' retries) the error is raised from
    `step()` or `end()` and the rewards are kept: `flush()` sends the same ones again, so a
    reward that did reach the lake is not stored twice under another id. `info` of the step
    that ends an episode gains `"atdp": Episode`; `episode` is the last ended one. Other
    attributes (`action_space`, `observation_space`, `close`, ...) are the environment's.
    """

    def __init__(
        self,
        env: Environment,
        client: ClientT,
        rewards: Rewards,
        *,
        reward: str,
        step_reward: str | None = None,
        env_name: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        if not reward:
            raise ValueError("name the reward the episode's return is posted as")
        reserved = sorted(set(tags or {}) & set(_OWN_TAGS))
        if reserved:
            raise ValueError(f"tags {reserved} are set by TrajectoryEnv itself")
        self.env = env
        self._client = client
        self._rewards = rewards
        self._reward = reward
        self._step_reward = step_reward
        self._env_name = env_name or type(env).__name__
        self._tags = dict(tags or {})
        self._trajectory: Trajectory[ClientT] | None = None
        self._seed: int | None = None
        self._running = False
        self._seen = 0
        self._steps = 0
        self._return = 0.0
        self._step_rewards: list[tuple[str, float]] = []
        self._unsent: list[Reward] = []
        self.episode: Episode | None = None

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes this class lacks: the environment's public ones.
        env = self.__dict__.get("env")
        if env is None or name.startswith("_"):
            raise AttributeError(name)
        return getattr(env, name)

    @property
    def client(self) -> ClientT:
        """The agent's client for the current episode: its calls join the episode's
        trajectory. Only after `reset()`."""
        return self.trajectory.client

    @property
    def trajectory(self) -> Trajectory[ClientT]:
        """The current episode's trajectory. Only after `reset()`."""
        if self._trajectory is None:
            raise RuntimeError("call reset() first: an episode's calls need its trajectory")
        return self._trajectory

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Starts an episode, and a new trajectory for it. An episode left unfinished posts
        nothing. Refused while an ended episode's rewards are unsent: `flush()` them first."""
        if self._unsent:
            raise RuntimeError("the last episode's rewards are unsent: call flush()")
        self._trajectory = Trajectory(self._client)
        self._seed = seed
        self._running = True
        self._seen = 0
        self._steps = 0
        self._return = 0.0
        self._step_rewards = []
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Steps the environment; at the episode's end, posts its rewards."""
        if not self._running:
            raise RuntimeError("no episode is running: call reset()")
        trajectory = self.trajectory
        observation, reward, terminated, truncated, info = self.env.step(action)
        value = float(reward)
        if not math.isfinite(value):
            self._running = False
            raise ValueError(
                f"the environment's reward {reward!r} is not a finite number: "
                "the episode is abandoned and posts nothing"
            )
        self._steps += 1
        self._return += value
        step_ids = trajectory.step_ids
        if self._step_reward is not None and len(step_ids) > self._seen:
            self._step_rewards.append((step_ids[-1], value))
        self._seen = len(step_ids)
        if terminated or truncated:
            info = dict(info)
            info["atdp"] = self.end(truncated=not terminated)
        return observation, reward, terminated, truncated, info

    def end(self, *, truncated: bool = True) -> Episode:
        """Ends the running episode now (truncated unless `truncated=False`: a framework's
        time limit, say) and posts its rewards."""
        if not self._running:
            raise RuntimeError("no episode is running: call reset()")
        trajectory = self.trajectory
        self._running = False
        terminated = not truncated
        tags = dict(self._tags)
        tags["env"] = self._env_name
        tags["ended"] = "terminated" if terminated else "truncated"
        if self._seed is not None:
            tags["seed"] = str(self._seed)
        trajectory_id = trajectory.trajectory_id
        self._unsent = [
            Reward(trajectory_id, self._reward, self._return, terminal=terminated, tags=tags),
        ]
        if self._step_reward is not None:
            self._unsent += [
                Reward(trajectory_id, self._step_reward, value, step_id=step_id, tags=tags)
                for step_id, value in self._step_rewards
            ]
        self.episode = Episode(
            trajectory_id=trajectory_id,
            step_ids=trajectory.step_ids,
            seed=self._seed,
            env_steps=self._steps,
            episode_return=self._return,
            terminated=terminated,
            truncated=truncated,
        )
        self.flush()
        return self.episode

    def flush(self) -> list[Recorded]:
        """Sends the ended episode's rewards if they are still unsent (the same rewards, ids
        included, as the attempt that failed); returns what was recorded."""
        if self._unsent:
            recorded = self._rewards.send(self._unsent)
            self._unsent = []
            if self.episode is not None:
                self.episode.rewards = recorded
            return recorded
        return []


def run_episode(
    env: TrajectoryEnv[ClientT],
    act: Callable[[ClientT, Any, dict[str, Any]], Any],
    *,
    seed: int | None = None,
    max_steps: int = 1000,
) -> Episode:
    """Plays one episode: `act(client, observation, info)` chooses each action, calling the
    model through `client`. Stops at the environment's end, or ends the episode as truncated
    after `max_steps` environment steps."""
    if max_steps < 1:
        raise ValueError("max_steps must be at least 1")
    observation, info = env.reset(seed=seed)
    for _ in range(max_steps):
        action = act(env.client, observation, info)
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            episode: Episode = info["atdp"]
            return episode
    return env.end(truncated=True)
