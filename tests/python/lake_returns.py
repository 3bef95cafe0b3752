"""Reads a lake with the atdp package's `atdp.lake` and prints what it selected, for the
trainer's test that the Rust trainer and the Python reader give the same returns.

    python tests/python/lake_returns.py --lake DIR --tenant T --weights '{"a": 1.0}' --gamma 0.9

Prints one JSON object: returns as [trajectory, step, value] sorted, the unmatched step
rewards, the examples (step ids with their reward and log-prob count), the GRPO groups (sizes),
the table versions read (also from the examples table's schema metadata) and the steps left
out because they may not be trained on, by reason.

With ``--slow-foreign-release SECONDS``, the blocks that deltalake's Python filesystem
(``deltalake.fs.DeltaStorageHandler``, which pyarrow's dataset scanner reads through) hands to
a native reader take that long to be released on any thread but the main one: the timing of a
loaded machine, where the Arrow worker that tears a finished scan down runs after the script
has returned. A reader that leaves such a release behind it aborts the interpreter at exit
("terminate called without an active exception"); one that does not exits 0.
"""

import argparse
import json
import threading
import time

from atdp.lake import Lake


def slow_foreign_release(seconds: float) -> None:
    """Delays, by ``seconds``, every release of a block read through deltalake's Python
    filesystem that happens on a thread other than the main one."""
    import pyarrow
    from deltalake.fs import DeltaStorageHandler

    class Block(bytes):
        def __del__(self) -> None:
            if threading.current_thread() is not threading.main_thread():
                time.sleep(seconds)

    class File:
        def __init__(self, inner: object) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        def read(self, nbytes: int = -1) -> Block:
            return Block(self.inner.read(nbytes))  # type: ignore[attr-defined]

    def open_input_file(self: DeltaStorageHandler, path: str) -> object:
        return pyarrow.PythonFile(File(self._handler.open_input_file(path)))

    DeltaStorageHandler.open_input_file = open_input_file  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lake", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--weights", required=True)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--since", type=int)
    parser.add_argument("--steps-version", type=int)
    parser.add_argument("--rewards-version", type=int)
    parser.add_argument("--slow-foreign-release", type=float)
    args = parser.parse_args()
    if args.slow_foreign_release is not None:
        slow_foreign_release(args.slow_foreign_release)
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
                "excluded": data.excluded,
                "metadata": metadata,
            }
        )
    )


if __name__ == "__main__":
    main()
