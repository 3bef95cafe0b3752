"""Reads a lake with the atdp package's `atdp.lake` and prints what it selected, for the
trainer's test that the Rust trainer and the Python reader give the same returns.

    python tests/python/lake_returns.py --lake DIR --tenant T --weights '{"a": 1.0}' --gamma 0.9

Prints one JSON object: returns as [trajectory, step, value] sorted, the unmatched step
rewards, the examples (step ids with their reward and log-prob count), the GRPO groups (sizes)
and the table versions read (also from the examples table's schema metadata).
"""

import argparse
import json

from atdp.lake import Lake


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lake", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--since", type=int)
    parser.add_argument("--steps-version", type=int)
    parser.add_argument("--rewards-version", type=int)
    args = parser.parse_args()
    data = Lake(args.lake).read(
        args.tenant,
        json.loads(args.weights),
        args.gamma,
        since=args.since,
        steps_version=args.steps_version,
        rewards_version=args.rewards_version,
    )
    examples = data.examples()
    metadata = {k.decode(): v.decode() for k, v in (examples.schema.metadata or {}).items()}
    rows = examples.to_pylist()
    sft = data.messages()
    print(
        json.dumps(
            {
                "returns": sorted([t, s, v] for (_, t, s), v in data.returns.items()),
                "unmatched": data.unmatched_step_rewards,
                "examples": sorted(
                    [r["step_id"], r["reward"], len(r["behaviour_logprobs"] or [])] for r in rows
                ),
                "example_columns": examples.column_names,
                "groups": sorted(len(g) for g in data.grpo_groups()),
                "sft_last_roles": sorted({m["messages"][-1]["role"] for m in sft.to_pylist()}),
                "versions": data.versions,
                "metadata": metadata,
            }
        )
    )


if __name__ == "__main__":
    main()
