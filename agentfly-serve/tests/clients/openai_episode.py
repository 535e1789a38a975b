"""Drives agentfly's endpoint with the official `openai` client: a two-turn tool-calling
episode in a recorded session (non-streaming, then streaming), the reward posted, the
trajectories fetched; errors as the client raises them. Prints one JSON object: what the
client received and what the server recorded, for the Rust test to check."""

import json
import sys
import urllib.error
import urllib.request

import openai

base = sys.argv[1]  # http://HOST:PORT
TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Adds two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}]


def http(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def episode(session, stream):
    client = openai.OpenAI(base_url=f"{base}/sessions/{session}/v1", api_key="unused")
    messages = [{"role": "system", "content": "You add numbers."},
                {"role": "user", "content": "What is 2 + 3?"}]
    received = []
    for _ in range(2):
        if stream:
            chunks = list(client.chat.completions.create(
                model="m", messages=messages, tools=TOOLS, temperature=0.7, stream=True,
                stream_options={"include_usage": True}))
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
            finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
            usage = [c.usage for c in chunks if c.usage][0]
            message = {"role": "assistant", "content": content or None}
            if calls:
                message["tool_calls"] = [{"id": tc.id, "type": "function",
                                          "function": {"name": tc.function.name, "arguments": tc.function.arguments}}
                                         for tc in calls]
            got = {"content": content or None, "tool_calls": message.get("tool_calls", []),
                   "finish_reason": finish[0], "completion_tokens": usage.completion_tokens}
        else:
            reply = client.chat.completions.create(model="m", messages=messages, tools=TOOLS,
                                                   temperature=0.7, logprobs=True)
            choice = reply.choices[0]
            message = choice.message.model_dump(exclude_none=True)
            got = {"content": choice.message.content,
                   "tool_calls": [tc.model_dump() for tc in choice.message.tool_calls or []],
                   "finish_reason": choice.finish_reason,
                   "completion_tokens": reply.usage.completion_tokens,
                   "logprob_tokens": [t.token for t in choice.logprobs.content]}
        received.append(got)
        messages.append(message)
        for call in message.get("tool_calls", []):
            args = json.loads(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(args["a"] + args["b"])})
    status, _ = http("POST", f"/sessions/{session}/reward", {"reward": 1.0, "metrics": {"correct": 1}})
    assert status == 200, status
    status, lines = http("GET", f"/sessions/{session}/trajectories")
    assert status == 200, status
    return {"received": received, "trajectories": [json.loads(l) for l in lines.splitlines()]}


out = {"plain": episode("plain-1", False), "stream": episode("stream-1", True)}

client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
out["models"] = [m.id for m in client.models.list()]
errors = {}
try:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], temperature=5)
except openai.BadRequestError as e:
    errors["temperature"] = {"status": e.status_code, "param": e.body.get("param"), "message": e.body.get("message")}
try:
    client.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "hi"}])
except openai.BadRequestError as e:
    errors["role"] = {"status": e.status_code, "param": e.body.get("param")}
try:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], n="two")
except openai.BadRequestError as e:
    errors["n"] = {"status": e.status_code, "param": e.body.get("param")}
try:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                   stop=["a", "b", "c", "d", "e"])
except openai.BadRequestError as e:
    errors["stops"] = {"status": e.status_code, "param": e.body.get("param")}
errors["huge_reward"] = http("POST", "/sessions/stream-0/reward", {"reward": 1e39})[0]
errors["ended"] = http("POST", "/sessions/plain-1/v1/chat/completions",
                       {"messages": [{"role": "user", "content": "again"}]})[0]
errors["again"] = http("POST", "/sessions/plain-1/reward", {"reward": 0})[0]
errors["unknown"] = http("POST", "/sessions/nobody/reward", {"reward": 0})[0]
errors["bad_reward"] = http("POST", "/sessions/stream-1/reward", {"reward": "high"})[0]
errors["bad_id"] = http("POST", "/sessions/a%20b/v1/chat/completions", {"messages": []})[0]
out["errors"] = errors
print(json.dumps(out))
