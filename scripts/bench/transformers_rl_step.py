"""The PyTorch side of the RL-shaped row of `cargo bench --bench training`: one PPO update
(old log-probs without gradient, then the clipped surrogate on the sampled tokens with
gradient accumulation, global-norm clipping, AdamW) over the very rows agentfly trains on,
done the way Python RL trainers do it on one device: micro-batches of a fixed number of
rows in the batch's order, right-padded, logits at every position. Prints JSON."""

import argparse
import json
import os

import torch
from transformers import AutoModelForCausalLM

from train_timing import report_best_of


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--rows", required=True, help="JSON written by the bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = json.load(open(args.rows))
    rows, per_micro = spec["rows"], spec["micro_batch_rows"]
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0)
    total = sum(sum(r["mask"][1:]) for r in rows)

    micro = []
    for start in range(0, len(rows), per_micro):
        part = rows[start:start + per_micro]
        width = max(len(r["tokens"]) for r in part)
        ids = torch.zeros(len(part), width, dtype=torch.long)
        attn = torch.zeros(len(part), width, dtype=torch.long)
        mask = torch.zeros(len(part), width - 1)
        adv = torch.zeros(len(part), width - 1)
        for i, r in enumerate(part):
            n = len(r["tokens"])
            ids[i, :n] = torch.tensor(r["tokens"])
            attn[i, :n] = 1
            mask[i, :n - 1] = torch.tensor(r["mask"][1:], dtype=torch.float)
            adv[i, :n - 1] = r["advantage"]
        micro.append((ids, attn, mask, adv))

    def logprobs(ids, attn):
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        picked = logits.gather(-1, ids[:, 1:, None]).squeeze(-1)
        return picked - torch.logsumexp(logits, dim=-1)

    def step():
        with torch.no_grad():
            old = [logprobs(ids, attn) for ids, attn, _, _ in micro]
        opt.zero_grad(set_to_none=True)
        loss_value = 0.0
        for (ids, attn, mask, adv), old_lp in zip(micro, old):
            ratio = torch.exp(logprobs(ids, attn) - old_lp)
            surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
            loss = (surrogate * mask).sum() / total
            loss.backward()
            loss_value += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss_value

    report_best_of(step, args.runs)


if __name__ == "__main__":
    main()
