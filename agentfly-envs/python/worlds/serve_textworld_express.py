"""TextWorldExpress (PyPI `textworld-express`, a JVM driven through py4j) as an agentfly
remote environment.

Config (`RemoteConfig::config`): `game` (`twc` — TextWorld-Commonsense, put household
objects where they belong — `coin`, `arithmetic`, `sorting`, `mapreader`, `simonsays`,
`peckingorder`, `cookingworld`), `params` (the game's generation string, e.g.
`numLocations=1,numItemsToPutAway=2,includeDoors=0`), `fold` (`train`, `dev` or `test`:
the game's own disjoint seed ranges), `step_limit`, and `show_valid_actions` (true: every
observation ends with the actions the game accepts now, as AgentFly's ALFWorld prompts list
the admissible commands).

Reset options (a chain's sample fields): `fold`, `index` (the game: an index into the
fold's own seeds — train 0-999, dev 10000-10999, test 20000-20999 — so folds never share a
game), or `seed` (a raw seed; the reset's seed when neither is given), and `gold` (true:
the reset's info carries `gold_actions`, the game's own solution, for demonstrations).
The first observation is the task description, then the room; the info's `seed` is the
game's seed.
"""

from agentfly_remote import serve
from textworld_express import TextWorldExpressEnv


class TextWorldExpress:
    def __init__(self, config):
        self.game = config.get("game", "twc")
        self.params = config.get("params", "")
        self.fold = config.get("fold", "train")
        self.env = TextWorldExpressEnv(envStepLimit=int(config.get("step_limit", 50)))
        self.show_valid = bool(config.get("show_valid_actions", False))
        self.env.load(self.game, self.params)
        self.seeds = {
            "train": list(self.env.getValidSeedsTrain()),
            "dev": list(self.env.getValidSeedsDev()),
            "test": list(self.env.getValidSeedsTest()),
        }

    def reset(self, seed=None, options=None):
        options = options or {}
        fold = options.get("fold", self.fold)
        seed = options.get("seed", seed)
        if options.get("index") is not None:
            seeds = self.seeds[fold]
            seed = seeds[int(options["index"]) % len(seeds)]
        gold = bool(options.get("gold", False))
        observation, infos = self.env.reset(
            seed=seed if seed is None else int(seed),
            gameFold=fold,
            gameName=self.game,
            gameParams=self.params,
            generateGoldPath=gold,
        )
        info = self.info(infos, done=False)
        info["seed"] = seed
        if gold:
            info["gold_actions"] = list(self.env.getGoldActionSequence())
        return self.shown(infos["taskDescription"] + "\n\n" + observation.strip(), info), info

    def step(self, action):
        observation, reward, done, infos = self.env.step(action)
        info = self.info(infos, done)
        truncated = bool(done and not infos["tasksuccess"] and not infos["taskfailure"] and infos["score"] < 1)
        text = observation.strip() if done else self.shown(observation.strip(), info)
        return text, reward, done and not truncated, truncated, info

    def shown(self, text, info):
        if not self.show_valid:
            return text
        return text + "\nValid actions: " + ", ".join(info["valid_actions"]) + "."

    def info(self, infos, done):
        return {
            "valid_actions": sorted(infos["validActions"]),
            "score": infos["score"],
            "success": bool(infos["tasksuccess"] or infos["score"] >= 1),
            "failure": bool(infos["taskfailure"]),
            "moves": infos["numMoves"],
        }

    def close(self):
        self.env.close()


if __name__ == "__main__":
    serve(TextWorldExpress)
