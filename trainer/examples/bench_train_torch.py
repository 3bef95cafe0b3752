"""The PyTorch + PEFT side of `scripts/bench-train`: the step `bench-train` measures, in PyTorch.

    python trainer/examples/bench_train_torch.py --model /tmp/atdp-bench-train/qwen2-0.5b --seq 1024

The same model directory `bench-train` generates (random f32 weights), LoRA r 8 / alpha 16 on
all seven projections (PEFT's initialisation), one sequence of the same token ids, the loss
-mean log p(next token) over the same scored positions, backward, AdamW at 1e-4 (weight
decay 0). Attention is transformers' default (SDPA). One unmeasured step, then the median
of the measured ones. Prints one line of JSON: wall and CPU seconds a step, tokens/s, peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def token_ids(seq: int, step: int, vocab: int) -> torch.Tensor:
    """`bench-train`'s deterministic spread of token ids for a step."""
    ids = [(i * 2_654_435_761 + step * 97) % vocab for i in range(seq)]
    return torch.tensor([ids], dtype=torch.long)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--completion", type=int, help="positions scored (the last N); default all")
    p.add_argument("--threads", type=int, help="torch.set_num_threads (default: PyTorch's)")
    p.add_argument(
        "--checkpointing",
        action="store_true",
        help="gradient checkpointing (transformers'), the counterpart of bench-train --recompute",
    )
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TARGETS)
    if args.checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = get_peft_model(base, config)
    model.train()
    params = [q for q in model.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    vocab = base.config.vocab_size
    scored = min(max(args.completion or args.seq - 1, 1), args.seq - 1)
    first = args.seq - 1 - scored

    walls, cpus = [], []
    for step in range(args.steps + 1):
        ids = token_ids(args.seq, step, vocab)
        wall, cpu = time.perf_counter(), time.process_time()
        logits = model(input_ids=ids).logits[0, first : args.seq - 1].float()
        targets = ids[0, first + 1 :]
        log_probs = torch.log_softmax(logits, dim=-1).gather(1, targets.unsqueeze(1))
        loss = -log_probs.mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        del logits, log_probs, loss
        if step > 0:
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    wall = statistics.median(walls)
    print(
        json.dumps(
            {
                "system": "pytorch",
                "seq": args.seq,
                "scored": scored,
                "threads": torch.get_num_threads(),
                "checkpointing": args.checkpointing,
                "lora_parameters": sum(q.numel() for q in params),
                "step_s": round(wall, 3),
                "cpu_s": round(statistics.median(cpus), 3),
                "tokens_per_s": round(args.seq / wall, 1),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "versions": {
                    "torch": torch.__version__,
                    "transformers": __import__("transformers").__version__,
                    "peft": __import__("peft").__version__,
                },
            }
        )
    )


if __name__ == "__main__":
    main()
