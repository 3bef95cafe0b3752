#!/usr/bin/env python3
"""Train the names tagger and write its weights (detect/data/names/tagger.bin) and the
check file its Rust test compares against (detect/data/names/tagger-check.json).

Input: the feature files that `names-features` (detect/examples/names-features.rs) writes
for one or more corpora (`PREFIX.features`, `PREFIX.labels`, `PREFIX.texts`), so that the
network learns from exactly the features the scanner computes.

The network (detect/src/names/tagger.rs reads it): each token's feature embeddings
summed (EmbeddingBag), the token's and `--window` neighbours' sums on each side side by side
(zero beyond the text), one hidden ReLU layer, seven outputs (O, B/I of PERSON, LOCATION,
ORGANIZATION). Embeddings start at zero, so that a bucket no training token used adds
nothing. During training, the word-identity slots of a token are dropped at random
(`--drop`), which makes the network read the lists, the shape and the context as well as the
word itself.

The weight file: `ATDPTAG1`, the header length (u32 LE), the header (JSON: buckets, dim,
window, hidden, features, labels), then little-endian arrays: embeddings as i8 (buckets x dim),
one f32 scale per bucket, w1 (hidden x (2 window + 1) dim), b1, w2 (7 x hidden), b2, as f32.

    scripts/train-names        # corpora, features, training and the check file, end to end
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

LABELS = ["O", "B-PERSON", "I-PERSON", "B-LOCATION", "I-LOCATION", "B-ORGANIZATION",
          "I-ORGANIZATION"]
# Slots of the word itself (word, suffix, prefix, the word two before), dropped at random.
WORD_SLOTS = [0, 1, 2]

# Texts whose probabilities the Rust test recomputes from the weight file.
CHECK_TEXTS = [
    "Hi, I'm Jane Doe and I live at 12 Baker Street, London NW1 6XE.",
    "hey its marta kowalska again, pls call me back",
    '{"customer":"Jean-Luc Picard","company":"Starfleet Logistics GmbH","city":"Paris"}',
    "Ticket OPS-1234 status changed from Open to Closed on Monday.",
    "Mvh Erik Axelsson, Pettersson & Jonsson HB",
]


def load(prefix: str, features: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = np.fromfile(prefix + ".features", dtype="<u4").reshape(-1, features)
    labels = np.fromfile(prefix + ".labels", dtype=np.uint8)
    texts = np.fromfile(prefix + ".texts", dtype="<u4")
    assert len(ids) == len(labels) == int(texts.sum()), prefix
    return ids, labels, texts


def windows(texts: np.ndarray, window: int) -> np.ndarray:
    """For each token, the row of each token of its window, or -1 beyond its text."""
    total = int(texts.sum())
    index = np.arange(total)
    ends = np.repeat(np.cumsum(texts), texts)
    starts = ends - np.repeat(texts, texts)
    out = np.empty((total, 2 * window + 1), dtype=np.int64)
    for k, offset in enumerate(range(-window, window + 1)):
        at = index + offset
        out[:, k] = np.where((at >= starts) & (at < ends), at, -1)
    return out


class Tagger(nn.Module):
    def __init__(self, buckets: int, dim: int, window: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(buckets, dim, padding_idx=0)
        nn.init.zeros_(self.embed.weight)
        self.w1 = nn.Linear((2 * window + 1) * dim, hidden)
        self.w2 = nn.Linear(hidden, len(LABELS))
        self.dim = dim

    def summed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids).sum(dim=1)

    def forward(self, sums: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        # `sums` has a zero row last, where -1 points.
        x = sums[rows].reshape(rows.shape[0], -1)
        return self.w2(torch.relu(self.w1(x)))


def quantised(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scale = np.abs(weight).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.round(weight / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


def export(model: Tagger, args: argparse.Namespace, path: Path) -> None:
    embed = model.embed.weight.detach().numpy().astype(np.float32)
    q, scale = quantised(embed)
    header = json.dumps({
        "buckets": args.buckets, "dim": args.dim, "window": args.window,
        "hidden": args.hidden, "features": args.features, "labels": LABELS,
    }).encode()
    with open(path, "wb") as f:
        f.write(b"ATDPTAG1")
        f.write(struct.pack("<I", len(header)))
        f.write(header)
        f.write(q.tobytes())
        f.write(scale.astype("<f4").tobytes())
        for t in (model.w1.weight, model.w1.bias, model.w2.weight, model.w2.bias):
            f.write(t.detach().numpy().astype("<f4").tobytes())
    # What the Rust side computes: the same network with the dequantised embeddings.
    with torch.no_grad():
        model.embed.weight.copy_(torch.from_numpy(q.astype(np.float32) * scale[:, None]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", action="append", required=True, help="feature prefix (repeatable)")
    ap.add_argument("--features-tool", required=True, help="the names-features example binary")
    ap.add_argument("--out", default="detect/data/names/tagger.bin")
    ap.add_argument("--check", default="detect/data/names/tagger-check.json")
    ap.add_argument("--buckets", type=int, default=65536)
    ap.add_argument("--features", type=int, default=14)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--drop", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    rng = np.random.default_rng(args.seed)

    parts = [load(p, args.features) for p in args.train]
    ids = np.concatenate([p[0] for p in parts]).astype(np.int64)
    labels = np.concatenate([p[1] for p in parts]).astype(np.int64)
    texts = np.concatenate([p[2] for p in parts])
    rows = windows(texts, args.window)
    total = len(labels)
    rows[rows < 0] = total
    print(f"train: {len(texts)} texts, {total} tokens, label shares "
          f"{np.bincount(labels, minlength=7) / total}", file=sys.stderr)

    model = Tagger(args.buckets, args.dim, args.window, args.hidden)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    ids_t, rows_t, labels_t = torch.from_numpy(ids), torch.from_numpy(rows), torch.from_numpy(labels)
    steps = args.epochs * ((total + args.batch - 1) // args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        order = torch.from_numpy(rng.permutation(total))
        seen, running = 0, 0.0
        for start in range(0, total, args.batch):
            batch = order[start:start + args.batch]
            window_rows = rows_t[batch]
            # The summed embeddings of every token the batch's windows touch.
            needed, inverse = torch.unique(window_rows, return_inverse=True)
            real = needed[needed < total]
            slot_ids = ids_t[real].clone()
            drop = torch.rand(slot_ids.shape[0], len(WORD_SLOTS)) < args.drop
            slot_ids[:, WORD_SLOTS] = torch.where(drop, 0, slot_ids[:, WORD_SLOTS])
            sums = model.summed(slot_ids)
            if len(real) < len(needed):
                sums = torch.cat([sums, torch.zeros(1, args.dim)])
            logits = model(sums, inverse)
            loss = loss_fn(logits, labels_t[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            running += loss.item() * len(batch)
            seen += len(batch)
        print(f"epoch {epoch + 1}: loss {running / seen:.4f}", file=sys.stderr)

    out = Path(args.out)
    export(model, args, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)", file=sys.stderr)

    # The check file: the probabilities of the check texts, from the dequantised network, on
    # the features the Rust code computes for them.
    check_dir = Path(args.check).parent
    corpus = check_dir / "tagger-check.tmp.jsonl"
    corpus.write_text("".join(json.dumps({"text": t, "spans": []}) + "\n" for t in CHECK_TEXTS))
    prefix = str(check_dir / "tagger-check.tmp")
    subprocess.run([args.features_tool, str(corpus), prefix, str(args.buckets)], check=True)
    c_ids, _, c_texts = load(prefix, args.features)
    c_rows = windows(c_texts, args.window)
    c_rows[c_rows < 0] = len(c_ids)
    with torch.no_grad():
        sums = torch.cat([model.summed(torch.from_numpy(c_ids.astype(np.int64))),
                          torch.zeros(1, args.dim)])
        probs = torch.softmax(model(sums, torch.from_numpy(c_rows)), dim=1).numpy()
    for suffix in (".features", ".labels", ".texts"):
        Path(prefix + suffix).unlink()
    corpus.unlink()
    cases, at = [], 0
    for text, n in zip(CHECK_TEXTS, c_texts):
        cases.append({"text": text, "probabilities": [[round(float(x), 6) for x in row]
                                                      for row in probs[at:at + int(n)]]})
        at += int(n)
    lines = ",\n".join("  " + json.dumps(case, ensure_ascii=False) for case in cases)
    Path(args.check).write_text(f'{{"labels": {json.dumps(LABELS)},\n "cases": [\n{lines}\n]}}\n')
    print(f"wrote {args.check}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
