"""The lake for your own trainer: a tenant's steps and rewards at pinned Delta versions, as
Arrow tables in the shapes common trainers take.

    from atdp.lake import Lake

    lake = Lake("atdp-data/lake")                      # or "s3://bucket/lake", storage_options=...
    data = lake.read("acme", weights={"task_success": 1.0}, gamma=0.9)
    table = data.examples()                            # prompt, completion, reward (the return), logprobs
    groups = data.grpo_groups()                        # examples grouped by prompt
    sft = data.messages(min_reward=0.5)                # chat `messages` for supervised fine-tuning
    table.to_pandas(); datasets.Dataset(table)         # pandas, Hugging Face datasets

Placeholders of masked text (``<PERSON_0123456789ab>``) are rendered as surrogate values of
their type (a fake name, e-mail address, card number, ...), the same for the same
placeholder of the tenant, as the Rust trainer renders them (:mod:`atdp.surrogates`): a model
trained on the examples meets real values in serving, never placeholders, and must not learn
to write them. ``lake.read(..., placeholders="keep")`` keeps the text as stored.

The returns are the Rust trainer's (`trainer/src/returns.rs`), computed the same way from the
same rows: rewards matched within the tenant; duplicates (same trajectory, step, name, source
and function version) resolved to the latest; names weighted; a step reward credits its own
step of its own trajectory; a trajectory reward attaches to the trajectory's most recent leaf
and flows back along `parent_step_id` discounted by `gamma` per step. The table versions read
are in :attr:`LakeData.versions` and in each table's schema metadata, so a run can be repeated
on exactly the same data (pass them back as ``steps_version`` and ``rewards_version``).

Only steps that may be trained on are read, by the rule every atdp training reader applies
(``docs/atdp-v1.md``): a step marked ineligible (``training_eligible`` false), past its
``retention_until``, or unmarked (written before ATDP 1.1; unless ``unmarked="eligible"``) is
left out by the query itself and only counted, by reason, in :attr:`LakeData.excluded`.

Needs the ``lake`` extra: ``pip install "./python[lake]"`` (``deltalake`` and ``pyarrow``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from atdp.surrogates import render_step

__all__ = ["Lake", "LakeData", "step_returns"]

StepKey = tuple[str, str, str]

#: How steps without a training mark are treated: not read (the default), or read.
UNMARKED = ("excluded", "eligible")


def _modules() -> tuple[Any, Any]:
    try:
        import deltalake
        import pyarrow
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            'atdp.lake needs deltalake and pyarrow: pip install "atdp[lake]"'
        ) from error
    return deltalake, pyarrow


def step_returns(
    steps: Iterable[Mapping[str, Any]],
    rewards: Iterable[Mapping[str, Any]],
    weights: Mapping[str, float],
    gamma: float = 1.0,
) -> tuple[dict[StepKey, float], int]:
    """The weighted, discounted return of every step that received some reward, by
    (tenant, trajectory, step), and the number of step rewards that credited nothing (their
    ``step_id`` is not a given step of their own tenant and trajectory)."""
    steps = list(steps)
    by_key = {(s["tenant_id"], s["trajectory_id"], s["step_id"]): s for s in steps}
    continued = {
        (s["tenant_id"], s["trajectory_id"], s["parent_step_id"])
        for s in steps
        if s.get("parent_step_id") is not None
    }
    last_leaf: dict[tuple[str, str], Mapping[str, Any]] = {}
    for s in steps:
        if (s["tenant_id"], s["trajectory_id"], s["step_id"]) in continued:
            continue
        trajectory = (s["tenant_id"], s["trajectory_id"])
        entry = last_leaf.setdefault(trajectory, s)
        if (s["started_at"], s["step_id"]) > (entry["started_at"], entry["step_id"]):
            last_leaf[trajectory] = s

    def order(value: str | None) -> tuple[bool, str]:
        # The Rust side sorts `Option<&str>`: None before any string.
        return (value is not None, value or "")

    latest: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for r in rewards:
        if r["name"] not in weights:
            continue
        value, weight = r["value"], weights[r["name"]]
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"reward {r['reward_id']} ({r['name']}): value {value} is not a finite number")
        if weight != weight or weight in (float("inf"), float("-inf")):
            raise ValueError(f"reward {r['reward_id']} ({r['name']}): weight {weight} is not a finite number")
        dedup = (
            r["tenant_id"],
            r["trajectory_id"],
            order(r.get("step_id")),
            r["name"],
            r["source"],
            order(r.get("reward_fn_version")),
        )
        entry = latest.setdefault(dedup, r)
        # The latest wins; at the same time, the greater reward_id (as the Rust trainer).
        if (r["created_at"], r["reward_id"]) > (entry["created_at"], entry["reward_id"]):
            latest[dedup] = r

    returns: dict[StepKey, float] = {}

    def credit(step: Mapping[str, Any], value: float) -> None:
        key = (step["tenant_id"], step["trajectory_id"], step["step_id"])
        returns[key] = returns.get(key, 0.0) + value

    unmatched = 0
    for dedup in sorted(latest):
        r = latest[dedup]
        value = weights[r["name"]] * r["value"]
        step_id = r.get("step_id")
        if step_id is not None:
            step = by_key.get((r["tenant_id"], r["trajectory_id"], step_id))
            if step is None:
                unmatched += 1
            else:
                credit(step, value)
            continue
        current = last_leaf.get((r["tenant_id"], r["trajectory_id"]))
        seen: set[str] = set()
        discount = 1.0
        while current is not None and current["step_id"] not in seen:
            seen.add(current["step_id"])
            credit(current, discount * value)
            discount *= gamma
            parent = current.get("parent_step_id")
            current = (
                by_key.get((current["tenant_id"], current["trajectory_id"], parent))
                if parent is not None
                else None
            )
    return returns, unmatched


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _query(table: Any, sql: str) -> Any:
    """``sql`` over ``table`` (registered as ``lake_table``), as a ``pyarrow.Table``."""
    deltalake, pyarrow = _modules()
    stream = deltalake.QueryBuilder().register("lake_table", table).execute(sql)
    return pyarrow.table(stream)


def _rows(table: Any, where: str) -> list[dict[str, Any]]:
    """The rows of a Delta table matching the SQL predicate ``where`` as dicts, times as µs
    since the epoch (integers, as the protocol writes them and the Rust trainer compares them).

    delta-rs reads the files itself (DataFusion, in Rust, through the table's own object
    store and options) and hands the rows over as an Arrow C stream, read to the end here:
    no Python object backs a buffer, and nothing of the read runs on after the call.
    ``DeltaTable.to_pyarrow_table`` is not used: it scans with pyarrow's dataset scanner over
    a Python filesystem, whose blocks are Python objects, and the scanner's worker threads
    finish tearing the scan down after the call has returned; a worker that releases such a
    block once the interpreter is finalizing aborts the process ("terminate called without
    an active exception", status 134), after the program has done its work."""
    _, pyarrow = _modules()
    data = _query(table, f"SELECT * FROM lake_table WHERE {where}")
    for index, column in enumerate(data.schema):
        if pyarrow.types.is_timestamp(column.type):
            micros = data.column(index).cast(pyarrow.timestamp("us", tz=column.type.tz)).cast(pyarrow.int64())
            data = data.set_column(index, column.name, micros)
    rows: list[dict[str, Any]] = data.to_pylist()
    return rows


def _trainable(marked: bool, now: int, unmarked: str) -> str:
    """The SQL predicate of the steps that may be trained on at ``now`` (µs since the epoch):
    eligible (or unmarked, when ``unmarked`` is ``eligible``) and not past ``retention_until``.
    A table without the governance columns (protocol version 1) has only unmarked rows."""
    if not marked:
        return "TRUE" if unmarked == "eligible" else "FALSE"
    eligible = "training_eligible IS TRUE" if unmarked == "excluded" else "training_eligible IS NOT FALSE"
    return (
        f"({eligible} AND (retention_until IS NULL"
        f" OR arrow_cast(retention_until, 'Int64') > {int(now)}))"
    )


def _exclusions(table: Any, where: str, marked: bool, now: int, unmarked: str) -> dict[str, int]:
    """The steps matching ``where`` that may not be trained on, counted by reason (the first
    of ``not_eligible``, ``unmarked``, ``retention_expired``); only the reason of each row is
    computed, no row is read."""
    if not marked:
        if unmarked == "eligible":
            return {}
        reason = "'unmarked'"
    else:
        unmarked_case = (
            "WHEN training_eligible IS NULL THEN 'unmarked' " if unmarked == "excluded" else ""
        )
        reason = (
            "CASE WHEN training_eligible = false THEN 'not_eligible' "
            f"{unmarked_case}ELSE 'retention_expired' END"
        )
    data = _query(
        table,
        f"SELECT {reason} AS reason, count(*) AS n FROM lake_table"
        f" WHERE {where} AND NOT {_trainable(marked, now, unmarked)} GROUP BY 1",
    )
    return {row["reason"]: int(row["n"]) for row in data.to_pylist() if row["n"]}


@dataclass
class Erasures:
    """What the allowed erasures of one tenant reached (``atdp-audit erase``, read from its
    ``erase`` audit events): the erased subjects' tokens, the trajectories the subject
    erasures reached when they ran, and when the tenant's keys were last erased (µs since
    the epoch), if ever."""

    tokens: set[str] = field(default_factory=set)
    trajectories: set[str] = field(default_factory=set)
    tenant_erased_at: int | None = None


class Lake:
    """An ATDP lake: a directory or an ``s3://``, ``gs://``, ``az://`` URL, with the object
    store's options (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ... as delta-rs takes them)."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = uri.rstrip("/")
        self.storage_options = dict(storage_options or {})

    def table(self, name: str, version: int | None = None) -> Any:
        """The Delta table ``name`` (``steps``, ``rewards``, ``audit``, ``pii_vault``), at
        ``version`` or the latest. Read its rows with ``deltalake.QueryBuilder``, as
        :meth:`read` does: its ``to_pyarrow_table`` and ``to_pyarrow_dataset`` scan through a
        Python filesystem and can abort the interpreter at exit (see ``_rows``)."""
        deltalake, _ = _modules()
        return deltalake.DeltaTable(
            f"{self.uri}/atdp/v1/{name}",
            version=version,
            storage_options=self.storage_options or None,
        )

    def _erased(self, tenant: str) -> Erasures:
        """The allowed erasures of ``tenant`` in the ``audit`` table (none without the table).
        An ``erase`` event whose detail cannot be read raises: what it erased is unknown."""
        deltalake, _ = _modules()
        try:
            audit = self.table("audit")
        except deltalake.exceptions.TableNotFoundError:
            return Erasures()
        erasures = Erasures()
        where = f"tenant_id = {_literal(tenant)} AND kind = 'erase' AND decision = 'allow'"
        for event in _rows(audit, where):
            try:
                detail = json.loads(event["detail_json"])
                scope, tokens = detail["scope"], detail.get("tokens") or []
                trajectories = detail.get("trajectories") or []
                if not all(isinstance(t, str) for t in [*tokens, *trajectories]):
                    raise TypeError("tokens and trajectories are lists of strings")
            except (TypeError, ValueError, KeyError) as e:
                raise ValueError(
                    f"erasure {event['event_id']} has no readable scope and tokens, so what it erased is unknown"
                ) from e
            if scope == "tenant":
                at = int(event["occurred_at"])
                erasures.tenant_erased_at = max(at, erasures.tenant_erased_at or at)
            else:
                erasures.tokens.update(tokens)
                erasures.trajectories.update(trajectories)
        return erasures

    def _erased_trajectories(self, tenant: str, steps_table: Any) -> set[str]:
        """The trajectories of ``tenant`` its allowed erasures reached, among all its steps in
        ``steps_table`` (not only those a read selects): those a subject erasure recorded as
        reached when it ran, those with a step that carries an erased subject's token, and
        those with a step that started before the tenant's keys were erased. Training leaves
        them out, whole, as the Rust trainer does."""
        erasures = self._erased(tenant)
        reached: set[str] = set(erasures.trajectories)
        tenant_is = f"tenant_id = {_literal(tenant)}"
        if erasures.tenant_erased_at is not None:
            data = _query(
                steps_table,
                f"SELECT DISTINCT trajectory_id FROM lake_table WHERE {tenant_is}"
                f" AND arrow_cast(started_at, 'Int64') < {int(erasures.tenant_erased_at)}",
            )
            reached.update(data.column("trajectory_id").to_pylist())
        if erasures.tokens:
            tokens = ", ".join(_literal(t) for t in sorted(erasures.tokens))
            data = _query(
                steps_table,
                "SELECT DISTINCT trajectory_id FROM (SELECT trajectory_id, unnest(pii) AS span"
                f" FROM lake_table WHERE {tenant_is}) WHERE span['token'] IN ({tokens})",
            )
            reached.update(data.column("trajectory_id").to_pylist())
        return reached

    def versions(self) -> dict[str, int]:
        """The latest version of the steps and rewards tables."""
        return {name: self.table(name).version() for name in ("steps", "rewards")}

    def read(
        self,
        tenant: str,
        weights: Mapping[str, float],
        gamma: float = 1.0,
        *,
        agent: str | None = None,
        since: int | None = None,
        until: int | None = None,
        reward_versions: Mapping[str, str] | None = None,
        steps_version: int | None = None,
        rewards_version: int | None = None,
        unmarked: str = "excluded",
        now: int | None = None,
        placeholders: str = "surrogate",
    ) -> "LakeData":
        """The steps of ``tenant`` (only ``agent``, started in [``since``, ``until``) in µs
        since the epoch) that may be trained on at ``now`` (µs since the epoch, never earlier
        than the time of the call, which is the default), and the rewards of their trajectories with the names of
        ``weights`` (each pinned to a function version by ``reward_versions``), as the Rust
        trainer selects them, with their returns. Steps left out are counted by reason in
        :attr:`LakeData.excluded`; unmarked steps are read only with ``unmarked="eligible"``,
        and a trajectory an erasure reached is left out whole (counted as ``erased``).
        With ``placeholders="surrogate"`` (the default) the placeholders of the steps'
        messages and tool descriptions are rendered as surrogate values
        (:func:`atdp.surrogates.render_step`); ``"keep"`` leaves them."""
        if placeholders not in ("surrogate", "keep"):
            raise ValueError(f'placeholders={placeholders!r}: use "surrogate" or "keep"')
        if not tenant:
            raise ValueError("name the tenant: rewards are only matched to steps of the same tenant")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma {gamma} must be in [0, 1]")
        if unmarked not in UNMARKED:
            raise ValueError(f"unmarked {unmarked!r} must be one of {', '.join(UNMARKED)}")
        # A later `now` narrows what is read (steps expiring before it); an earlier one would
        # bring back expired steps, so the time of the call is the earliest taken.
        current = time.time_ns() // 1000
        now = current if now is None else max(int(now), current)
        steps_table = self.table("steps", steps_version)
        marked = any(f.name == "training_eligible" for f in steps_table.schema().fields)
        where = f"tenant_id = {_literal(tenant)}"
        if agent is not None:
            where += f" AND agent_id = {_literal(agent)}"
        if since is not None:
            where += f" AND arrow_cast(started_at, 'Int64') >= {int(since)}"
        if until is not None:
            where += f" AND arrow_cast(started_at, 'Int64') < {int(until)}"
        excluded = _exclusions(steps_table, where, marked, now, unmarked)
        steps = [
            s
            for s in _rows(steps_table, f"{where} AND {_trainable(marked, now, unmarked)}")
            if s["tenant_id"] == tenant
        ]
        steps.sort(key=lambda s: s["started_at"])
        reached = self._erased_trajectories(tenant, steps_table)
        if reached:
            kept = [s for s in steps if s["trajectory_id"] not in reached]
            excluded["erased"] = excluded.get("erased", 0) + len(steps) - len(kept)
            steps = kept
        if placeholders == "surrogate":
            for s in steps:
                render_step(s)
        trajectories = {s["trajectory_id"] for s in steps}
        pinned = dict(reward_versions or {})
        rewards_table = self.table("rewards", rewards_version)
        rewards = [
            r
            for r in _rows(rewards_table, f"tenant_id = {_literal(tenant)}")
            if r["tenant_id"] == tenant
            and r["name"] in weights
            and r["trajectory_id"] in trajectories
            and (
                r["name"] not in pinned
                or ("none" if r["reward_fn_version"] is None else r["reward_fn_version"])
                == pinned[r["name"]]
            )
        ]
        returns, unmatched = step_returns(steps, rewards, weights, gamma)
        return LakeData(
            tenant=tenant,
            steps=steps,
            rewards=rewards,
            returns=returns,
            unmatched_step_rewards=unmatched,
            versions={"steps": steps_table.version(), "rewards": rewards_table.version()},
            excluded=excluded,
            placeholders=placeholders,
        )


@dataclass
class LakeData:
    """What :meth:`Lake.read` selected: rows as dicts, returns by (tenant, trajectory, step),
    the table versions read, and the steps left out because they may not be trained on, by
    reason (``not_eligible``, ``unmarked``, ``retention_expired``, ``erased``)."""

    tenant: str
    steps: list[dict[str, Any]]
    rewards: list[dict[str, Any]]
    returns: dict[StepKey, float]
    unmatched_step_rewards: int
    versions: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)
    #: ``surrogate`` or ``keep``: how the placeholders of masked text were rendered.
    placeholders: str = "surrogate"

    def _metadata(self) -> dict[bytes, bytes]:
        return {
            b"atdp.tenant": self.tenant.encode(),
            b"atdp.steps_version": str(self.versions.get("steps")).encode(),
            b"atdp.rewards_version": str(self.versions.get("rewards")).encode(),
            b"atdp.excluded": json.dumps(self.excluded, sort_keys=True).encode(),
            b"atdp.placeholders": self.placeholders.encode(),
        }

    def _table(self, rows: list[dict[str, Any]]) -> Any:
        _, pyarrow = _modules()
        table = pyarrow.Table.from_pylist(rows)
        return table.replace_schema_metadata(self._metadata())

    def example_rows(self, include_unrewarded: bool = False) -> list[dict[str, Any]]:
        """One row per step the trainer learns from (status ``ok``, with a reply): the
        prompt (the request's messages), the completion, its return as ``reward`` (None
        for a step no reward reached, included only with ``include_unrewarded``), and the
        behaviour policy's log-probs and token ids where they were recorded."""
        rows = []
        for s in self.steps:
            reply = s.get("response_message")
            if s["status"] != "ok" or reply is None:
                continue
            reward = self.returns.get((s["tenant_id"], s["trajectory_id"], s["step_id"]))
            if reward is None and not include_unrewarded:
                continue
            rows.append(
                {
                    "tenant_id": s["tenant_id"],
                    "trajectory_id": s["trajectory_id"],
                    "step_id": s["step_id"],
                    "parent_step_id": s.get("parent_step_id"),
                    "turn_index": s["turn_index"],
                    "agent_id": s["agent_id"],
                    "prompt": s["request_messages"],
                    "tools": s.get("tools") or [],
                    "completion": reply.get("content") or "",
                    "completion_message": reply,
                    "reward": reward,
                    "behaviour_logprobs": s.get("completion_logprobs"),
                    "completion_token_ids": s.get("completion_token_ids"),
                    "model_served": s.get("model_served"),
                    "policy_version": s.get("policy_version"),
                    "tags": json.dumps(dict(s.get("tags") or {}), sort_keys=True),
                }
            )
        return rows

    def examples(self, include_unrewarded: bool = False) -> Any:
        """:meth:`example_rows` as a ``pyarrow.Table`` (``.to_pandas()``, or
        ``datasets.Dataset(table)`` for Hugging Face)."""
        return self._table(self.example_rows(include_unrewarded))

    def grpo_groups(self, by: str = "prompt") -> list[list[dict[str, Any]]]:
        """The rewarded examples grouped as GRPO compares them: by identical prompt, or by
        the value of a tag (``by="tag:<name>"``; examples without it are left out). Groups
        of one are left out (nothing to compare with)."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in self.example_rows():
            if by == "prompt":
                key = json.dumps(row["prompt"], sort_keys=True)
            elif by.startswith("tag:") and len(by) > 4:
                key = json.loads(row["tags"]).get(by[4:])
                if key is None:
                    continue
            else:
                raise ValueError(f'by={by!r}: use "prompt" or "tag:<name>"')
            groups.setdefault(key, []).append(row)
        return [group for group in groups.values() if len(group) > 1]

    def messages(self, min_reward: float | None = None) -> Any:
        """Chat ``messages`` (the prompt, then the reply) for supervised fine-tuning, one row
        per example; with ``min_reward``, only examples whose return reaches it."""
        rows = [
            {
                "trajectory_id": row["trajectory_id"],
                "step_id": row["step_id"],
                "messages": list(row["prompt"]) + [row["completion_message"]],
                "reward": row["reward"],
            }
            for row in self.example_rows(include_unrewarded=min_reward is None)
            if min_reward is None or (row["reward"] is not None and row["reward"] >= min_reward)
        ]
        return self._table(rows)
