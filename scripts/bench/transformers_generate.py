"""The transformers side of `cargo bench --bench generation`: the same measurements on the
same weights (a Hugging Face directory agentfly saved from the GGUF), printed as JSON with
the process's peak resident memory (the bench runs one row a process: `--skip-prefill`,
`--batches ""` for none)."""

import argparse
import json
import os
import resource
import time

import torch
from transformers import AutoModelForCausalLM


def best_of(runs, fn):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--prefill", type=int, default=256)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--skip-prefill", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).eval()
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "dtype": args.dtype}
    with torch.inference_mode():
        ids = torch.randint(100, vocab, (1, args.prefill), generator=gen)
        if not args.skip_prefill:
            model(ids)  # warm-up
            t = best_of(args.runs, lambda: model(ids, use_cache=True))
            out["prefill_tokens_per_s"] = args.prefill / t
        decode = {}
        for batch in [int(b) for b in args.batches.split(",") if b]:
            prompts = torch.randint(100, vocab, (batch, args.prompt_len), generator=gen)
            mask = torch.ones_like(prompts)

            def run(n):
                model.generate(
                    prompts, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                    do_sample=False, pad_token_id=0, eos_token_id=None,
                )

            run(2)  # warm-up
            t1 = best_of(args.runs, lambda: run(1))
            tn = best_of(args.runs, lambda: run(args.new_tokens))
            decode[str(batch)] = batch * (args.new_tokens - 1) / (tn - t1)
        out["decode_tokens_per_s"] = decode
    out["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main()
