"""Policy-gradient LoRA training with PyTorch and PEFT on an atdp lake.

    python examples/pytorch/train_lora.py --lake atdp-data/lake --tenant acme \\
        --model /models/qwen2-0.5b --reward task_success=1.0 --out runs/torch-v1

Your own trainer on our lake, in one file you can adapt: it reads the tenant's rewarded steps
at pinned Delta versions with `atdp.lake` (returns computed as `atdp-train` computes them),
renders each recorded prompt with the model's own chat template, and trains a LoRA adapter
by REINFORCE with a batch-mean baseline: the loss is -sum(advantage * log p(token)) over the
batch's completion tokens, divided by their number, as `atdp-train`'s `reinforce` objective
computes it for steps without recorded log-probs; here the learning rate is constant and
there is no KL term and no clipping. It writes a PEFT adapter (`adapter_config.json`,
`adapter_model.safetensors`), which the registry takes as it takes `atdp-train`'s:

    atdp-serve --lake atdp-data/lake --policy support publish runs/torch-v1
    atdp-loop --lake atdp-data/lake --policy support --base /models/qwen2-0.5b gate 2

and `run.json` beside it: the lake's table versions and row counts, the rewards and the
settings, and the loss and mean reward of every optimizer step. `--scores N` also writes
`scores.json`: the token ids and per-token log-probabilities of the first N examples under
the trained adapter, so that another implementation can check it computes the same policy.

Needs `torch`, `transformers`, `peft` and the `atdp` package with its `lake` extra
(`pip install ./python[lake]`). `--device cuda` trains on a GPU. This is one process; for
several GPUs, shard `examples()` (a `pyarrow.Table`) across workers and wrap the model in
DistributedDataParallel (or hand the rows to a framework that does).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import pathlib
import random
import sys
from typing import Any

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from atdp.lake import Lake

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def chat_message(m: dict[str, Any]) -> dict[str, Any]:
    """A stored message as chat templates expect it (OpenAI's shape), as `atdp-train`
    renders it: tool-call arguments parsed when they are JSON."""
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("name") is not None:
        out["name"] = m["name"]
    if m.get("tool_call_id") is not None:
        out["tool_call_id"] = m["tool_call_id"]
    calls = []
    for c in m.get("tool_calls") or []:
        try:
            arguments: Any = json.loads(c["arguments"])
        except ValueError:
            arguments = c["arguments"]
        calls.append({"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": arguments}})
    if calls:
        out["tool_calls"] = calls
    return out


def chat_tool(t: dict[str, Any]) -> dict[str, Any]:
    """A stored tool definition as chat templates expect it."""
    try:
        parameters = json.loads(t.get("parameters") or "")
    except ValueError:
        parameters = {"type": "object", "properties": {}}
    function: dict[str, Any] = {"name": t["name"], "parameters": parameters}
    if t.get("description") is not None:
        function["description"] = t["description"]
    return {"type": t.get("kind") or "function", "function": function}


def tokenize(
    tokenizer: Any, row: dict[str, Any], max_len: int, vocab: int
) -> tuple[list[int], list[int]] | None:
    """Prompt and completion token ids: the conversation rendered with the reply, less the
    prompt, cut after the end-of-turn token. Recorded token ids are used when every one is
    below `vocab`. None when the prompt does not fit `max_len`."""
    messages = [chat_message(m) for m in row["prompt"]]
    tools = [chat_tool(t) for t in row.get("tools") or []] or None
    prompt = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    reply = dict(chat_message(row["completion_message"]), role="assistant")
    full = tokenizer.apply_chat_template(messages + [reply], tools=tools, tokenize=False)
    eos = tokenizer.eos_token
    if full.startswith(prompt):
        rest = full[len(prompt) :]
        end = rest.rfind(eos)
        completion = rest[: end + len(eos)] if end >= 0 else rest + eos
    else:
        completion = (row["completion"] or "") + eos
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    recorded = row.get("completion_token_ids")
    if recorded and all(0 <= t < vocab for t in recorded):
        completion_ids = list(recorded)
    else:
        completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    if len(prompt_ids) >= max_len:
        return None
    return prompt_ids, completion_ids[: max_len - len(prompt_ids)]


def completion_log_probs(
    model: Any, batch: list[tuple[list[int], list[int]]], pad: int, device: torch.device
) -> list[torch.Tensor]:
    """Per-token log-probabilities of each example's completion, in one right-padded forward
    pass; the softmax runs in f32 over the completion positions only."""
    width = max(len(p) + len(c) for p, c in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for i, (p, c) in enumerate(batch):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        mask[i, : len(p) + len(c)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    out = []
    for i, (p, c) in enumerate(batch):
        # The token at position t is predicted by the logits at t - 1.
        rows = logits[i, len(p) - 1 : len(p) + len(c) - 1].float()
        targets = torch.tensor(c, device=device).unsqueeze(1)
        out.append(torch.log_softmax(rows, dim=-1).gather(1, targets).squeeze(1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lake", required=True, help="the lake's root: a directory or s3://, gs://, az:// URL")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--agent")
    parser.add_argument("--since", help="RFC 3339: only steps started at or after it")
    parser.add_argument("--steps-version", type=int, help="read the steps table at this Delta version")
    parser.add_argument("--rewards-version", type=int, help="read the rewards table at this Delta version")
    parser.add_argument("--reward", action="append", required=True, metavar="NAME=WEIGHT")
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--model", required=True, help="a Hugging Face model directory (the base model)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--max-len", type=int, default=2048)
    parser.add_argument("--clip", type=float, default=1.0, help="gradient clipping by global norm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="a torch device: cpu, cuda, cuda:1, ...")
    parser.add_argument("--scores", type=int, default=0, metavar="N")
    args = parser.parse_args()

    weights = {}
    for item in args.reward:
        name, _, weight = item.partition("=")
        try:
            weights[name] = float(weight or 1.0)
        except ValueError:
            parser.error(f"--reward {item!r}: the weight after '=' is not a number")
        if not name or not math.isfinite(weights[name]):
            parser.error(f"--reward {item!r}: expected NAME=WEIGHT with a finite weight")
    options = {}
    for item in args.storage_option:
        key, sep, value = item.partition("=")
        if not key or not sep:
            parser.error("--storage-option: expected KEY=VALUE")  # the value may be a secret: not echoed
        options[key] = value
    since = None
    if args.since:
        try:
            since = int(dt.datetime.fromisoformat(args.since).timestamp() * 1_000_000)
        except ValueError:
            parser.error(f"--since {args.since!r} is not an RFC 3339 time")

    torch.manual_seed(args.seed)
    lake = Lake(args.lake, storage_options=options)
    data = lake.read(
        args.tenant,
        weights,
        args.gamma,
        agent=args.agent,
        since=since,
        steps_version=args.steps_version,
        rewards_version=args.rewards_version,
    )
    device = torch.device(args.device)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    base: Any = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    base = base.to(device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    vocab = min(len(tokenizer), base.config.vocab_size)
    examples, skipped = [], 0
    for row in data.example_rows():
        tokens = tokenize(tokenizer, row, args.max_len, vocab)
        if tokens is None:
            skipped += 1
            continue
        examples.append((row["step_id"], tokens, float(row["reward"])))
    if len(examples) < 2:
        print(
            f"{len(examples)} rewarded examples for tenant {args.tenant} with rewards {sorted(weights)}: "
            "a batch-mean baseline needs at least two",
            file=sys.stderr,
        )
        return 1

    targets = [t for t in args.targets.split(",") if t]
    config = LoraConfig(
        r=args.rank,
        lora_alpha=args.alpha if args.alpha is not None else 2 * args.rank,
        lora_dropout=0.0,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
    )
    model: Any = get_peft_model(base, config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    order = random.Random(args.seed)

    history: list[dict[str, Any]] = []
    model.train()
    for epoch in range(args.epochs):
        batches = list(range(len(examples)))
        order.shuffle(batches)
        for start in range(0, len(batches), args.batch_size):
            chosen = [examples[i] for i in batches[start : start + args.batch_size]]
            if len(chosen) < 2:
                continue  # one example has no advantage over its own mean
            rewards = torch.tensor([r for _, _, r in chosen], device=device)
            advantages = rewards - rewards.mean()
            log_probs = completion_log_probs(model, [t for _, t, _ in chosen], pad, device)
            n_tokens = sum(len(lp) for lp in log_probs)
            loss = -sum(a * lp.sum() for a, lp in zip(advantages, log_probs)) / n_tokens
            optimizer.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], args.clip)
            optimizer.step()
            history.append(
                {
                    "step": len(history) + 1,
                    "epoch": epoch,
                    "loss": loss.item(),
                    "mean_reward": rewards.mean().item(),
                    "grad_norm": norm.item(),
                    "tokens": n_tokens,
                }
            )
            print(json.dumps(history[-1]), flush=True)
            if not math.isfinite(history[-1]["loss"]):
                print("the loss is not finite: stopping without an adapter", file=sys.stderr)
                return 1

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    run = {
        "trainer": "examples/pytorch/train_lora.py",
        "torch": torch.__version__,
        "lake": args.lake,
        "tenant": args.tenant,
        "versions": data.versions,
        "rows": {"steps": len(data.steps), "rewards": len(data.rewards)},
        "rewards": weights,
        "gamma": args.gamma,
        "examples": len(examples),
        "skipped_over_max_len": skipped,
        "unmatched_step_rewards": data.unmatched_step_rewards,
        "settings": {k: v for k, v in vars(args).items() if k not in ("storage_option",)},
        "steps": history,
    }
    (out / "run.json").write_text(json.dumps(run, indent=2))
    if args.scores:
        model.eval()
        scored = []
        with torch.no_grad():
            for step_id, (prompt_ids, completion_ids), _ in examples[: args.scores]:
                (lp,) = completion_log_probs(model, [(prompt_ids, completion_ids)], pad, device)
                scored.append(
                    {
                        "step_id": step_id,
                        "prompt_ids": prompt_ids,
                        "completion_ids": completion_ids,
                        "log_probs": lp.tolist(),
                    }
                )
        (out / "scores.json").write_text(json.dumps(scored))
    print(f"trained on {len(examples)} examples in {len(history)} steps; adapter in {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
