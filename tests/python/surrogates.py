"""The atdp package's surrogates, for the trainer's test that Rust and Python render the
placeholders of masked text the same way.

    python tests/python/surrogates.py tokens FILE
    python tests/python/surrogates.py lake --lake DIR --tenant T --weights '{"ok": 1.0}' [--placeholders keep]

``tokens`` reads a JSON list of ``[tenant, text]`` pairs from FILE and prints the JSON list of
``[surrogate(tenant, text), render(tenant, text)]`` (``surrogate`` is null for a text that is not
one placeholder). ``lake`` reads the tenant's examples with ``atdp.lake`` (including unrewarded
ones) and prints, for each, ``step_id``, the prompt's messages, the reply, the tools and the
recorded completion ids and log-probs as the examples table holds them, and the table's
``atdp.placeholders`` metadata.
"""

import argparse
import json

from atdp.lake import Lake
from atdp.surrogates import render, surrogate


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    tokens = commands.add_parser("tokens")
    tokens.add_argument("file")
    lake = commands.add_parser("lake")
    lake.add_argument("--lake", required=True)
    lake.add_argument("--tenant", required=True)
    lake.add_argument("--weights", required=True)
    lake.add_argument("--placeholders", default="surrogate")
    args = parser.parse_args()
    if args.command == "tokens":
        with open(args.file, encoding="utf-8") as f:
            pairs = json.load(f)
        print(json.dumps([[surrogate(t, text), render(t, text)] for t, text in pairs]))
        return
    data = Lake(args.lake).read(args.tenant, json.loads(args.weights), placeholders=args.placeholders)
    table = data.examples(include_unrewarded=True)
    rows = table.to_pylist()
    print(
        json.dumps(
            {
                "examples": [
                    {
                        "step_id": r["step_id"],
                        "prompt": r["prompt"],
                        "completion_message": r["completion_message"],
                        "tools": r["tools"],
                        "completion_token_ids": r["completion_token_ids"],
                        "behaviour_logprobs": r["behaviour_logprobs"],
                    }
                    for r in rows
                ],
                "placeholders": (table.schema.metadata or {}).get(b"atdp.placeholders", b"").decode(),
            }
        )
    )


if __name__ == "__main__":
    main()
