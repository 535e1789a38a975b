"""A calculator agent written as users write agents today: a loop on the official OpenAI
client, with its own tools and its own reward. Nothing in it knows about agentfly except
the three environment variables the trainer sets for each episode:

  OPENAI_BASE_URL      the episode's session on the trainer's endpoint (the client reads it)
  AGENTFLY_SAMPLE      the sample it plays, as JSON ({"id", "question", "answer", ...})
  AGENTFLY_REWARD_URL  where it posts {"reward": x} when the episode is over

Its tools run through `agentfly call` (the trainer's binary, AGENTFLY_EXE), so an episode
here and a chain of agentfly's own see the same observations, and greedy episodes give the
same tokens as greedy chains (examples/tests and agentfly-cli/tests/external.rs check it).
"""

import json
import os
import re
import subprocess
import urllib.request
from fractions import Fraction

import openai

TOOLS = [
    {"type": "function", "function": {
        "name": "calculator",
        "description": "Evaluates an arithmetic expression exactly.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "submit_answer",
        "description": "Submits the final answer and ends the task.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}},
                       "required": ["answer"]}}},
]


def call_tool(name, arguments):
    """The tool's observation and whether it failed, from `agentfly call`."""
    exe = os.environ.get("AGENTFLY_EXE", "agentfly")
    done = subprocess.run([exe, "call", name, arguments, "--json"], capture_output=True, text=True)
    try:
        out = json.loads(done.stdout)
    except json.JSONDecodeError:
        return f"Error: the tool failed: {done.stderr.strip()}", True
    return out["text"], out["is_error"]


def number(text):
    """The number a reply states: all of it, else its last number."""
    def parse(s):
        s = s.replace(",", "")
        try:
            return Fraction(s)
        except (ValueError, ZeroDivisionError):
            return None
    whole = parse(text.strip().lstrip("$").rstrip("."))
    if whole is not None:
        return whole
    for match in reversed(re.findall(r"[-−]?\d[\d.,]*", text)):
        value = parse(match.replace("−", "-").strip(",."))
        if value is not None:
            return value
    return None


def main():
    sample = json.loads(os.environ["AGENTFLY_SAMPLE"])
    client = openai.OpenAI()
    messages = [{"role": "system", "content": os.environ.get("AGENTFLY_SYSTEM_PROMPT", "")},
                {"role": "user", "content": sample["question"]}]
    answer = ""
    while True:
        try:
            reply = client.chat.completions.create(
                model="policy", messages=messages, tools=TOOLS).choices[0].message
        except openai.BadRequestError:
            break  # the episode's turns or tokens are spent
        messages.append(reply.model_dump(exclude_none=True))
        if not reply.tool_calls:
            answer = reply.content or ""
            break
        submitted = None
        for call in reply.tool_calls:
            text, failed = call_tool(call.function.name, call.function.arguments)
            if call.function.name == "submit_answer" and not failed:
                given = json.loads(call.function.arguments).get("answer")
                submitted = given if isinstance(given, str) else json.dumps(given)
                break
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        if submitted is not None:
            answer = submitted
            break
    post_reward(answer, sample)


def post_reward(answer, sample):
    """Scores the answer against the sample's and posts it: the episode is over."""
    got, expected = number(answer), number(str(sample["answer"]))
    correct = float(got is not None and got == expected)
    body = json.dumps({"reward": correct, "metrics": {"correct": correct}}).encode()
    request = urllib.request.Request(os.environ["AGENTFLY_REWARD_URL"], data=body,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request).read()


if __name__ == "__main__":
    main()
