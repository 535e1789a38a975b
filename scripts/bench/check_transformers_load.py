"""Loads a model directory saved by agentfly with transformers, unchanged, and compares it
with the reference fixtures. Prints one JSON object; used by the trainer's interop test."""

import argparse
import json

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--reference", required=True, help="safetensors with input_ids and logits")
    parser.add_argument("--tokenization", help="tokenization.json to check the tokenizer against")
    parser.add_argument("--greedy", help="greedy.json to check the chat template against")
    args = parser.parse_args()
    out = {}
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    ref = load_file(args.reference)
    with torch.inference_mode():
        logits = model(ref["input_ids"]).logits
    out["max_abs_diff"] = (logits - ref["logits"]).abs().max().item()
    if args.tokenization or args.greedy:
        tok = AutoTokenizer.from_pretrained(args.model)
        if args.tokenization:
            cases = json.load(open(args.tokenization))
            out["tokenizer_mismatches"] = [
                c["text"] for c in cases if tok.encode(c["text"], add_special_tokens=False) != c["ids"]
            ]
        if args.greedy:
            cases = json.load(open(args.greedy))
            out["template_mismatches"] = [
                i for i, c in enumerate(cases)
                if tok.apply_chat_template(c["messages"], add_generation_prompt=True, tokenize=False) != c["rendered"]
            ]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
