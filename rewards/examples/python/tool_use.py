#!/usr/bin/env python3
"""A trivial atdp reward program: 1.0 for a reply that calls a tool, else a small
length-based score (0.0 to 0.5) for a text reply, 0.0 when the call failed.

Protocol (docs/rewards.md): one JSON object per line on stdin, one step each
({"kind": "step", "step_id", "trajectory_id", "tenant_id", "messages", "response",
"status", "finish_reason", "tools", ...}); for each, print one line
{"step_id": ..., "value": <number>} (optionally "name") on stdout. Standard library only.

Try it by hand:
    echo '{"kind":"step","step_id":"s1","trajectory_id":"t1","status":"ok",
           "response":{"role":"assistant","content":"hi","tool_calls":[]}}' | python3 tool_use.py
"""

import json
import sys


def reward(step):
    if step.get("status") != "ok":
        return 0.0
    response = step.get("response") or {}
    if response.get("tool_calls"):
        return 1.0
    text = response.get("content") or ""
    return round(min(len(text), 2000) / 4000, 3)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        step = json.loads(line)
        print(json.dumps({"step_id": step["step_id"], "value": reward(step)}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
