"""Checks an atdp evidence bundle without atdp: row hashes, digest, and the anchor event's
hash (docs/audit.md §8, docs/atdp-v1.md for the chain formula). Exit status 0 when the bundle
is consistent, 1 with the reason otherwise.

    python check_evidence.py evidence.json
"""

import hashlib
import json
import sys


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check(bundle: dict) -> str:
    if bundle.get("format") != "atdp-evidence/1":
        return "not an atdp-evidence/1 bundle"
    for row in bundle["rows"]:
        if sha(row["row_json"]) != row["sha256"]:
            return f"row altered: {row['sha256']}"
    digest = sha("\n".join(r["sha256"] for r in bundle["rows"]))
    if digest != bundle["digest"]:
        return "row list altered"
    anchor = bundle["anchor"]
    if anchor["kind"] != "export" or json.loads(anchor["detail_json"])["digest"] != digest:
        return "the anchor does not record this digest"
    fields = ["event_id", "tenant_id", "chain_id", "chain_seq", "occurred_at", "kind", "actor",
              "subject", "decision", "policy_id", "reason", "detail_json"]
    content = json.dumps([anchor[f] for f in fields], separators=(",", ":"), ensure_ascii=False)
    if sha(anchor["prev_hash"] + "\n" + content) != anchor["hash"]:
        return "anchor altered"
    for event in bundle["related_events"]:
        content = json.dumps([event[f] for f in fields], separators=(",", ":"), ensure_ascii=False)
        if sha(event["prev_hash"] + "\n" + content) != event["hash"]:
            return f"related event altered: {event['event_id']}"
    return ""


def main() -> int:
    with open(sys.argv[1], encoding="utf-8") as f:
        bundle = json.load(f)
    problem = check(bundle)
    if problem:
        print(problem)
        return 1
    anchor = bundle["anchor"]
    print(json.dumps({"rows": len(bundle["rows"]), "chain_id": anchor["chain_id"],
                      "chain_seq": anchor["chain_seq"], "hash": anchor["hash"],
                      "event_id": anchor["event_id"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
