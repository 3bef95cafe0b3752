#!/usr/bin/env python3
"""Score predicted PERSON, LOCATION and ORGANIZATION spans against generate.py's truth.

Gold and predictions are JSON Lines of the same shape, one line per text, in the same order:
`{"text": ..., "spans": [{"start": .., "end": .., "entity": ..}]}` (character offsets, end
exclusive). Prints Markdown:

- per system and entity type: precision, recall and F1 with exact boundaries (a prediction
  counts when a truth span of the same type has the same start and end) and with overlap (a
  prediction counts when it overlaps a truth span of the same type; a truth span is found when
  a prediction of its type overlaps it);
- the masking view, which ignores types: the share of truth spans that predicted spans of any
  type cover less than 80% of ("leaked": a masker built on these predictions would let most of
  the value through), and the UTF-8 bytes inside predicted spans but outside every truth span,
  per KB of text ("over-masking");
- the same masking view by template category (`meta.category`), when the gold has it.

    python score.py gold.jsonl --pred spacy=spacy.jsonl --pred atdp=none.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

ENTITIES = ["PERSON", "LOCATION", "ORGANIZATION"]
COVERED = 0.8


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def spans_of(record: dict, entity: str | None = None) -> list[tuple[int, int]]:
    return [
        (s["start"], s["end"])
        for s in record["spans"]
        if entity is None or s["entity"] == entity
    ]


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def prf(tp_p: int, n_pred: int, tp_r: int, n_gold: int) -> tuple[float | None, float | None, float | None]:
    p = tp_p / n_pred if n_pred else None
    r = tp_r / n_gold if n_gold else None
    if p is None or r is None:
        return p, r, None
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def type_scores(gold: list[dict], pred: list[dict]) -> dict[str, dict[str, int]]:
    """Counts per entity type: gold, pred, exact hits, overlap hits of predictions and of gold."""
    counts: dict[str, dict[str, int]] = {e: defaultdict(int) for e in ENTITIES}
    for g, p in zip(gold, pred):
        for e in ENTITIES:
            gs, ps = spans_of(g, e), spans_of(p, e)
            c = counts[e]
            c["gold"] += len(gs)
            c["pred"] += len(ps)
            gset = set(gs)
            c["exact"] += sum(1 for s in ps if s in gset)
            c["pred_hit"] += sum(1 for s in ps if any(overlaps(s, t) for t in gs))
            c["gold_hit"] += sum(1 for t in gs if any(overlaps(s, t) for s in ps))
    return counts


def covered_chars(span: tuple[int, int], by: list[tuple[int, int]]) -> int:
    mask = bytearray(span[1] - span[0])
    for s in by:
        lo, hi = max(s[0], span[0]), min(s[1], span[1])
        for i in range(lo, hi):
            mask[i - span[0]] = 1
    return sum(mask)


def masking(gold: list[dict], pred: list[dict], key=lambda g: "all") -> dict[str, dict[str, float]]:
    """Per group: truth spans, leaked spans (by type too), over-masked bytes and text bytes."""
    groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for g, p in zip(gold, pred):
        grp = groups[key(g)]
        text = g["text"]
        ps = spans_of(p)
        grp["bytes"] += len(text.encode("utf-8"))
        for s in g["spans"]:
            span = (s["start"], s["end"])
            grp["gold"] += 1
            grp["gold_" + s["entity"]] += 1
            if covered_chars(span, ps) < COVERED * (span[1] - span[0]):
                grp["leaked"] += 1
                grp["leaked_" + s["entity"]] += 1
        inside_gold = bytearray(len(text))
        for s in spans_of(g):
            inside_gold[s[0]:s[1]] = b"\x01" * (s[1] - s[0])
        masked = bytearray(len(text))
        for s in ps:
            masked[s[0]:s[1]] = b"\x01" * (max(0, min(s[1], len(text)) - s[0]))
        grp["over"] += sum(
            len(text[i].encode("utf-8")) for i in range(len(text)) if masked[i] and not inside_gold[i]
        )
    return groups


def share(n: float, d: float) -> str:
    return "n/a" if not d else f"{n / d:.1%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gold", help="truth, JSON Lines from generate.py")
    ap.add_argument("--pred", action="append", required=True, metavar="NAME=PATH",
                    help="predictions of one system (repeatable)")
    ap.add_argument("--no-categories", action="store_true", help="leave out the per-category table")
    args = ap.parse_args()

    gold = load(args.gold)
    systems = []
    for arg in args.pred:
        name, sep, path = arg.partition("=")
        if not sep:
            ap.error(f"--pred takes NAME=PATH, got {arg!r}")
        pred = load(path)
        if len(pred) != len(gold):
            sys.exit(f"score: {path} has {len(pred)} lines, the gold {len(gold)}: predict on the same corpus")
        for i, (g, p) in enumerate(zip(gold, pred)):
            if "text" in p and p["text"] != g["text"]:
                sys.exit(f"score: line {i + 1} of {path} is another text than the gold's")
        systems.append((name, pred))

    total_bytes = sum(len(g["text"].encode("utf-8")) for g in gold)
    n_spans = sum(len(g["spans"]) for g in gold)
    print(f"Corpus: {len(gold):,} texts, {total_bytes / 1024:,.1f} KB (KB = 1,024 bytes), {n_spans:,} truth spans.\n")

    print("| System | Entity | Truth | Predicted | exact P | exact R | exact F1 | overlap P | overlap R | overlap F1 |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, pred in systems:
        counts = type_scores(gold, pred)
        rows = [(e, counts[e]) for e in ENTITIES]
        micro: dict[str, int] = defaultdict(int)
        for _, c in rows:
            for k, v in c.items():
                micro[k] += v
        rows.append(("all (micro)", micro))
        for e, c in rows:
            ep, er, ef = prf(c["exact"], c["pred"], c["exact"], c["gold"])
            op, orr, of = prf(c["pred_hit"], c["pred"], c["gold_hit"], c["gold"])
            print(f"| {name} | {e} | {c['gold']:,} | {c['pred']:,} | {fmt(ep)} | {fmt(er)} | {fmt(ef)} "
                  f"| {fmt(op)} | {fmt(orr)} | {fmt(of)} |")

    print(f"\nMasking view (types ignored): leaked = truth spans less than {COVERED:.0%} covered by "
          "predicted spans; over-masking = predicted bytes outside every truth span, per KB of text.\n")
    print("| System | leaked, all | PERSON | LOCATION | ORGANIZATION | over-masking (bytes/KB) |")
    print("|---|--:|--:|--:|--:|--:|")
    for name, pred in systems:
        m = masking(gold, pred)["all"]
        cells = [share(m["leaked"], m["gold"])] + [share(m["leaked_" + e], m["gold_" + e]) for e in ENTITIES]
        print(f"| {name} | {' | '.join(cells)} | {m['over'] / (m['bytes'] / 1024):.1f} |")

    if not args.no_categories and all("meta" in g for g in gold):
        cats = sorted({g["meta"]["category"] for g in gold})
        print("\nBy category: leaked share / over-masking (bytes/KB).\n")
        print("| System | " + " | ".join(cats) + " |")
        print("|---|" + "--:|" * len(cats))
        for name, pred in systems:
            m = masking(gold, pred, key=lambda g: g["meta"]["category"])
            cells = [f"{share(m[c]['leaked'], m[c]['gold'])} / {m[c]['over'] / (m[c]['bytes'] / 1024):.1f}" for c in cats]
            print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
