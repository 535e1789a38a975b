#!/usr/bin/env python3
"""Two evaluations of the same held-out questions, compared: each one's accuracy with its 95%
Wilson interval, and the exact two-sided McNemar test on the questions one answered and the
other did not.

    python3 examples/runs/git/compare.py BEFORE.jsonl AFTER.jsonl

Each file is the trajectories `agentfly eval --out FILE` writes (one per question). A
question is answered when its reward's `correct` metric is 1 (else its reward is positive),
as agentfly's own report counts it; a failed chain (an `error`) is counted apart.
"""

import json
import math
import sys


def load(path):
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)
            metrics = t.get("reward_metrics") or {}
            failed = t.get("error") is not None or t.get("reward_error") is not None
            if "correct" in metrics:
                ok = metrics["correct"] > 0.5
            else:
                ok = (t.get("reward") or 0.0) > 0.0
            out[t["sample_id"]] = ("failed" if failed else ok)
    return out


def wilson(k, n, z=1.959964):
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = p + z * z / (2 * n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return ((c - h) / d, (c + h) / d)


def mcnemar(b, c):
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def main():
    before, after = load(sys.argv[1]), load(sys.argv[2])
    if before.keys() != after.keys():
        sys.exit("the two files do not hold the same questions")
    for name, run in (("before", before), ("after", after)):
        n = len(run)
        k = sum(1 for v in run.values() if v is True)
        failed = sum(1 for v in run.values() if v == "failed")
        lo, hi = wilson(k, n)
        print(f"{name}: {k}/{n} correct ({lo:.3f}-{hi:.3f}), {failed} failed")
    gained = sum(1 for q in before if before[q] is not True and after[q] is True)
    lost = sum(1 for q in before if before[q] is True and after[q] is not True)
    print(f"paired: {gained} gained, {lost} lost, exact McNemar p = {mcnemar(gained, lost):.2g}")


if __name__ == "__main__":
    main()
