"""A tiny world for the remote-environment tests: reach a target total by adding.

Besides `add N`, actions that misbehave on purpose: `crash` kills the server, `hang` never
answers, `noise` prints to stdout (from Python and from a subprocess), `fail` raises, `big`
answers with a 2 MB observation, `pid` tells the server's process id. A reset option
`fate` of "kill" or "hang" makes the server kill itself (SIGKILL) or stop answering on the
episode's second step.
"""

import os
import signal
import subprocess
import time

from agentfly_remote import serve


class Counter:
    def __init__(self, config):
        self.target = int(config.get("target", 3))
        self.total = 0
        self.fate = None

    def reset(self, seed=None, options=None):
        self.total = 0
        self.fate = (options or {}).get("fate")
        if options and "target" in options:
            self.target = int(options["target"])
        elif seed is not None:
            self.target = 2 + seed % 5
        return "Reach %d. Total 0." % self.target, {"valid_actions": ["add 1", "add 2"]}

    def step(self, action):
        if self.fate and self.total >= 1:
            if self.fate == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)
        if action == "crash":
            os._exit(3)
        if action == "hang":
            time.sleep(3600)
        if action == "noise":
            print("noise from python")
            subprocess.run(["echo", "noise from a subprocess"])
        if action == "fail":
            raise ValueError("the world refuses")
        if action == "big":
            return "x" * (2 << 20), 0.0, False, False, {}
        if action == "pid":
            return str(os.getpid()), 0.0, False, False, {}
        if action.startswith("add "):
            self.total += int(action[4:])
        done = self.total >= self.target
        reward = 1.0 if self.total == self.target else 0.0
        info = {"score": min(self.total / self.target, 1.0), "success": self.total == self.target, "valid_actions": ["add 1", "add 2"], "odd": {1, 2}}
        return "Total %d." % self.total, reward, done, False, info


if __name__ == "__main__":
    serve(Counter)
