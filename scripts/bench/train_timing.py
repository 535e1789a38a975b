"""What the training peers share: time a step (one warm-up, then the best of `runs`) and
print the JSON `cargo bench --bench training` reads — torch's version and threads, the
seconds, and the process's peak resident memory."""

import json
import resource
import time

import torch


def report_best_of(step, runs):
    step()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(),
                      "seconds": min(times),
                      "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
