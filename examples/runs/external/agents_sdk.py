"""The calculator agent written with the OpenAI Agents SDK (`openai-agents` from PyPI), as
its users write agents: an `Agent` with `@function_tool`s, run by `Runner`. It is trained
unchanged: the only agentfly-specific lines are reading the sample and posting the reward
(the SDK's model is pointed at OPENAI_BASE_URL, the episode's session on the trainer).

    [rollout.external]
    command = ["../../../.venv-agents/bin/python", "agents_sdk.py"]
"""

import asyncio
import json
import os
import subprocess

from agents import (Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool,
                    set_tracing_disabled)
from agents.exceptions import AgentsException
from openai import AsyncOpenAI, BadRequestError

from agent import post_reward  # the reward, scored and posted as agent.py does

set_tracing_disabled(True)  # nothing leaves the machine


def agentfly_call(name, arguments):
    exe = os.environ.get("AGENTFLY_EXE", "agentfly")
    done = subprocess.run([exe, "call", name, json.dumps(arguments), "--json"],
                          capture_output=True, text=True)
    return json.loads(done.stdout)["text"] if done.stdout else done.stderr.strip()


@function_tool
def calculator(expression: str) -> str:
    """Evaluates an arithmetic expression exactly."""
    return agentfly_call("calculator", {"expression": expression})


@function_tool
def submit_answer(answer: str) -> str:
    """Submits the final answer and ends the task."""
    return agentfly_call("submit_answer", {"answer": answer})


async def main():
    sample = json.loads(os.environ["AGENTFLY_SAMPLE"])
    model = OpenAIChatCompletionsModel(model="policy", openai_client=AsyncOpenAI())
    agent = Agent(
        name="calculator",
        instructions=os.environ.get("AGENTFLY_SYSTEM_PROMPT", "Solve the arithmetic problem."),
        tools=[calculator, submit_answer],
        model=model,
        model_settings=ModelSettings(),
        tool_use_behavior={"stop_at_tool_names": ["submit_answer"]},
    )
    answer = ""
    try:
        result = await Runner.run(agent, sample["question"], max_turns=3)
        answer = str(result.final_output or "")
    except (AgentsException, BadRequestError):
        pass  # out of turns or tokens: no answer
    post_reward(answer, sample)


if __name__ == "__main__":
    asyncio.run(main())
