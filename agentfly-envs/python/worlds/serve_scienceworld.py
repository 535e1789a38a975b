"""ScienceWorld (PyPI `scienceworld`, a JVM driven through py4j) as an agentfly remote
environment.

Config (`RemoteConfig::config`): `task` (a task name, e.g. `boil`, `melt`,
`find-living-thing`; see ScienceWorldEnv.get_task_names()), `simplifications` (e.g.
`easy`), `fold` (`train`, `dev` or `test`: the task's own disjoint variations) and
`step_limit`.

Reset options (a chain's sample fields): `variation` (an index within the fold's list; the
reset's seed is used when it is absent), `fold`, and `gold` (true: the reset's info
carries `gold_actions`). The score is ScienceWorld's 0-100 (negative when the task
failed); `success` is a score of 100. The step reward is the score's change.
"""

from agentfly_remote import serve
from scienceworld import ScienceWorldEnv


class ScienceWorld:
    def __init__(self, config):
        self.task = config.get("task", "find-living-thing")
        self.simplifications = config.get("simplifications", "easy")
        self.fold = config.get("fold", "train")
        self.env = ScienceWorldEnv("", envStepLimit=int(config.get("step_limit", 100)))
        self.env.load(self.task, 0, self.simplifications)
        self.variations = {
            "train": self.env.get_variations_train(),
            "dev": self.env.get_variations_dev(),
            "test": self.env.get_variations_test(),
        }

    def reset(self, seed=None, options=None):
        options = options or {}
        fold = options.get("fold", self.fold)
        index = options.get("variation", seed or 0)
        variations = self.variations[fold]
        variation = variations[int(index) % len(variations)]
        gold = bool(options.get("gold", False))
        self.env.load(self.task, variation, self.simplifications, generateGoldPath=gold)
        observation, infos = self.env.reset()
        info = self.info(infos)
        info["variation"] = variation
        if gold:
            info["gold_actions"] = list(self.env.get_gold_action_sequence())
        return infos["taskDesc"] + "\n\n" + observation.strip(), info

    def step(self, action):
        observation, reward, done, infos = self.env.step(action)
        return observation.strip(), reward, done, False, self.info(infos)

    def info(self, infos):
        return {
            "valid_actions": sorted(infos["valid"]),
            "score": infos["score"],
            "success": infos["score"] >= 100,
            "moves": infos["moves"],
        }

    def close(self):
        self.env.close()


if __name__ == "__main__":
    serve(ScienceWorld)
