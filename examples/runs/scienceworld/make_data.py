#!/usr/bin/env python3
"""Writes the ScienceWorld task's data: train / val / test games and demonstrations.

    .venv-worlds/bin/python examples/runs/scienceworld/make_data.py OUT_DIR [--train N]
        [--val N] [--test N] [--demos N]

One task family, `find-non-living-thing` with ScienceWorld's `easy` simplifications: find a
non-living thing, focus on it, move it to the red box in the kitchen (gold paths of 5
actions). The splits come from the task's own disjoint folds of variations: test from the
test fold, validation from the dev fold, training games and demonstrations from the train
fold (disjoint variations). Each game is a sample whose `question` is its first observation
(the task description, then the room) and whose `fold` and `variation` tell the server
which game to play; a game whose first observation an earlier one had (two variations can
open alike) is skipped, so no held-out question is another split's. A demonstration plays the game's gold action sequence as a chain would:
the model's turns are `act` tool calls in the Hermes format, the tool's turns the world's
observations, as `agentfly`'s `act` tool shows them; the last action ends the game.
The samples are in the folds' own order: test, then validation, training, demonstrations.
"""

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[3] / "agentfly-envs" / "python" / "worlds"))
sys.path.insert(0, str(HERE.parents[3] / "agentfly-envs" / "python"))

from serve_scienceworld import ScienceWorld  # noqa: E402

CONFIG = {"task": "find-non-living-thing", "simplifications": "easy", "step_limit": 10}


def games(world, fold, count, seen, start=0):
    """`count` games of `fold` from variation `start` on, skipping a game whose first
    observation is `seen` (two variations can open alike), so no held-out game's question is
    another split's; returns them and the next variation."""
    out, index = [], start
    while len(out) < count:
        if index >= len(world.variations[fold]):
            sys.exit(f"the {fold} fold has fewer than {count} distinct games from {start}")
        first, info = world.reset(options={"fold": fold, "variation": index})
        if first not in seen:
            seen.add(first)
            out.append({"id": f"{fold}-{index}", "fold": fold, "variation": index,
                        "question": first, "task": CONFIG["task"],
                        "game_variation": info["variation"]})
        index += 1
    return out, index


def demonstration(world, index):
    first, info = world.reset(options={"fold": "train", "variation": index, "gold": True})
    messages = [{"role": "user", "content": first}]
    for action in info["gold_actions"]:
        call = json.dumps({"name": "act", "arguments": {"command": action}},
                          separators=(",", ":"), ensure_ascii=False)
        messages.append({"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"})
        observation, _, done, truncated, step = world.step(action)
        if done or truncated:
            if not step["success"]:
                raise SystemExit(f"train-{index}: the gold path did not succeed")
            return {"id": f"demo-train-{index}", "messages": messages, "fold": "train",
                    "variation": index}
        messages.append({"role": "tool", "name": "act", "content": observation.rstrip()})
    raise SystemExit(f"train-{index}: the gold path did not end the game")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--train", type=int, default=40)
    p.add_argument("--val", type=int, default=10)
    p.add_argument("--test", type=int, default=40)
    p.add_argument("--demos", type=int, default=40)
    a = p.parse_args()
    world = ScienceWorld(CONFIG)
    seen = set()
    test, _ = games(world, "test", a.test, seen)
    val, _ = games(world, "dev", a.val, seen)
    train, next_index = games(world, "train", a.train, seen)
    demo_games, _ = games(world, "train", a.demos, seen, next_index)
    splits = {
        "test": test,
        "val": val,
        "train": train,
        "demos": [demonstration(world, g["variation"]) for g in demo_games],
    }
    a.out.mkdir(parents=True, exist_ok=True)
    world.close()
    for name, samples in splits.items():
        (a.out / f"{name}.jsonl").write_text(
            "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in samples))
        print(f"{name}: {len(samples)}")


if __name__ == "__main__":
    main()
