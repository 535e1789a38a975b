"""Loads a base model with transformers and an adapter directory written by agentfly with
PEFT (`PeftModel.from_pretrained`), and compares its logits with agentfly's for the same ids
(`--reference`: a safetensors file with `ids` and `logits`). Prints JSON."""

import argparse
import json

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--adapter", required=True)
    parser.add_argument("--reference", required=True)
    args = parser.parse_args()
    reference = load_file(args.reference)
    ids = reference["ids"].round().long()
    base = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, args.adapter)
    model.eval()
    with torch.no_grad():
        got = model(input_ids=ids).logits
    with torch.no_grad(), model.disable_adapter():
        plain = model(input_ids=ids).logits
    print(json.dumps({
        "max_abs_diff": (got - reference["logits"]).abs().max().item(),
        "adapter_effect": (got - plain).abs().max().item(),
    }))


if __name__ == "__main__":
    main()
