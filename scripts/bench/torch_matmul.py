"""The PyTorch side of `cargo run --release -p agentfly-model --example amx_matmul`: the
same products at the same shapes, in f32 and in bf16 (bf16 tensors: oneDNN, which runs them
on AMX where the CPU has it). Prints one JSON object: label -> {"f32": GFLOP/s, "bf16": ...},
best of `--runs`."""

import argparse
import json
import os
import time

import torch


def best(runs, f):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    t = args.tokens
    out = {}
    with torch.no_grad():
        for name, k_in, n_out in [("up+gate", 576, 3072), ("down", 1536, 576), ("query", 576, 576)]:
            x = torch.randn(t, k_in)
            w = torch.randn(k_in, n_out) * 0.05
            dy = torch.randn(t, n_out)
            cases = [
                (f"{name}: X · W", lambda a, b, c: a @ b, (x, w, None), t * k_in * n_out),
                (f"{name}: dY · Wᵀ", lambda a, b, c: c @ b.t(), (x, w, dy), t * n_out * k_in),
                (f"{name}: Xᵀ · dY", lambda a, b, c: a.t() @ c, (x, w, dy), k_in * t * n_out),
            ]
            for label, product, inputs, macs in cases:
                row = {}
                for dtype in ("f32", "bf16"):
                    cast = [None if v is None else (v.bfloat16() if dtype == "bf16" else v) for v in inputs]
                    product(*cast)  # warm-up
                    row[dtype] = 2.0 * macs / best(args.runs, lambda: product(*cast)) / 1e9
                out[label] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
