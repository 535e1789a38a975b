"""`agentfly serve` on SmolLM2 driven by the official `openai` client: greedy answers alike
streamed and not, `n` choices, log-probabilities, several clients at once (the engine batches
them), and a recorded session's trajectory matching what the client received."""

import concurrent.futures
import json
import sys
import urllib.request

import openai

base = sys.argv[1]
client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
ask = [{"role": "user", "content": "Name three colours."}]

plain = client.chat.completions.create(model="smollm2", messages=ask, temperature=0, max_tokens=24, logprobs=True)
chunks = list(client.chat.completions.create(model="smollm2", messages=ask, temperature=0, max_tokens=24, stream=True))
streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
two = client.chat.completions.create(model="smollm2", messages=ask, temperature=1.0, seed=7, n=2, max_tokens=12)


def one(i):
    reply = client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": f"Count to {i + 2}."}],
        temperature=0, max_tokens=16)
    return reply.choices[0].message.content


with concurrent.futures.ThreadPoolExecutor(8) as pool:
    together = list(pool.map(one, range(8)))
alone = [one(i) for i in range(2)]

session = openai.OpenAI(base_url=f"{base}/sessions/colours/v1", api_key="unused")
recorded = session.chat.completions.create(model="smollm2", messages=ask, temperature=0, max_tokens=24)
with urllib.request.urlopen(f"{base}/sessions/colours/trajectories") as r:
    trajectories = [json.loads(line) for line in r.read().decode().splitlines()]

print(json.dumps({
    "plain": plain.choices[0].message.content,
    "plain_tokens": plain.usage.completion_tokens,
    "logprobs": [t.logprob for t in plain.choices[0].logprobs.content],
    "streamed": streamed,
    "two": [c.message.content for c in two.choices],
    "two_indices": [c.index for c in two.choices],
    "together": together,
    "alone": alone,
    "recorded": recorded.choices[0].message.content,
    "trajectories": trajectories,
}))
