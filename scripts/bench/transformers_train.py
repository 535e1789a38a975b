"""The PyTorch side of `cargo bench --bench training`: forward + backward + AdamW of the
causal-LM loss on the same weights, batch and sequence length (with `--lora-rank`, of PEFT
LoRA adapters on every projection). Prints JSON."""

import argparse
import os

import torch
from transformers import AutoModelForCausalLM

from train_timing import report_best_of


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--lora-rank", type=int, default=0, help="train PEFT LoRA adapters")
    parser.add_argument("--lora-alpha", type=float, default=32.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    if args.lora_rank:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(
            r=args.lora_rank, lora_alpha=args.lora_alpha, lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj"], task_type="CAUSAL_LM"))
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-6, weight_decay=0.0)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(100, vocab, (args.batch, args.seq), generator=gen)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        return loss.item()

    report_best_of(step, args.runs)


if __name__ == "__main__":
    main()
