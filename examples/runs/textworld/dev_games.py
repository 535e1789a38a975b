#!/usr/bin/env python3
"""Writes dev-fold TextWorld-Commonsense games for choosing RL settings without the test fold.

    .venv-worlds/bin/python examples/runs/textworld/dev_games.py RUN_DIR COUNT OUT.jsonl [SKIP]

RUN_DIR is a `agentfly textworld` run: its data/*.jsonl are read, and the games written here
share no game index and no first observation with any of them (so they are disjoint from its
validation split too). Games are taken in order of a fixed shuffle of the dev fold's 1000
(seed 7, not the job's), after skipping the first SKIP accepted ones (0 by default). Each line
is a sample as the job writes them: id, fold, index, question (the game's first observation,
as the game server shows it), seed, game.
"""

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[3] / "agentfly-envs" / "python" / "worlds"))
sys.path.insert(0, str(HERE.parents[3] / "agentfly-envs" / "python"))

from serve_textworld_express import TextWorldExpress  # noqa: E402

CONFIG = {
    "game": "twc",
    "params": "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0",
    "step_limit": 8,
    "show_valid_actions": True,
}


def main():
    run, count, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    skip = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    seen, used = set(), set()
    for split in ("train", "val", "test", "demos"):
        for line in (run / "data" / f"{split}.jsonl").read_text().splitlines():
            sample = json.loads(line)
            if "question" in sample:
                seen.add(sample["question"])
            else:  # a demonstration: its first message is the game's first observation
                seen.add(sample["messages"][0]["content"])
            if sample.get("fold") == "dev":
                used.add(sample["index"])
    world = TextWorldExpress(CONFIG)
    order = list(range(1000))
    random.Random(7).shuffle(order)
    games = []
    for index in order:
        if len(games) == count + skip:
            break
        if index in used:
            continue
        first, info = world.reset(options={"fold": "dev", "index": index})
        if first in seen:
            continue
        seen.add(first)
        games.append({"id": f"dev-{index}", "fold": "dev", "index": index, "question": first,
                      "seed": info["seed"], "game": "twc"})
    world.close()
    if len(games) < count + skip:
        sys.exit(f"only {len(games)} distinct dev games")
    out.write_text("".join(json.dumps(g) + "\n" for g in games[skip:]))


if __name__ == "__main__":
    main()
