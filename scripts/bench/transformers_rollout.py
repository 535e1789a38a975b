"""The transformers side of `cargo bench --bench rollout`: the same rollout (calculator, or
with --corpus the wiki-qa tools: search by SQLite FTS5 BM25, retrieve from a dictionary) as
Python agent loops built on `model.generate` run it (AgentFly's HF backend, TRL-style
multi-turn loops): up to C chains are active; every round, all active chains generate
together in one left-padded batch, then their tool calls run, finished chains make room
for the next samples. Greedy, same weights, same prompts. Prints JSON."""

import argparse
import ast
import json
import operator
import os
import re
import resource
import sqlite3
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def calc(expr):
    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
            return OPS[type(node.op)](ev(node.operand))
        raise ValueError("unsupported expression")

    try:
        value = ev(ast.parse(expr, mode="eval").body)
        return str(int(value)) if float(value).is_integer() else str(value)
    except Exception as e:  # the model reads the error
        return f"Error: {e}"


class Wiki:
    """search and retrieve over the corpus, in Python: FTS5 BM25 (titles weighted double)
    and a title dictionary; their text as agentfly's tools write it."""

    def __init__(self, path):
        self.articles = {a["title"]: a for a in json.load(open(path)).values()}
        self.by_key = {self.key(t): a for t, a in self.articles.items()}
        self.db = sqlite3.connect(":memory:")
        self.db.execute("create virtual table docs using fts5(title, body, tokenize='porter unicode61')")
        self.db.executemany("insert into docs values (?, ?)",
                            [(a["title"], f'{a.get("description", "")} {a["extract"]}')
                             for a in self.articles.values()])

    @staticmethod
    def key(title):
        return " ".join(re.findall(r"\w+", title.lower()))

    def top(self, query, k, column="docs"):
        words = re.findall(r"\w+", query)
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in words)
        if column != "docs":
            match = f"{column}: ({match})"
        rows = self.db.execute(
            "select title from docs where docs match ? order by bm25(docs, 2.0, 1.0) limit ?",
            (match, k)).fetchall()
        return [r[0] for r in rows]

    def text(self, a):
        head = f"{a['title']} ({a['description']})" if a.get("description") else a["title"]
        return f"{head}\n{a['extract']}"

    def call(self, name, args):
        if name == "search":
            titles = self.top(str(args.get("query", "")), min(int(args.get("k") or 3), 10))
            return "\n".join(f"{i + 1}. {t}: {self.articles[t].get('description', '')}"
                             for i, t in enumerate(titles)) or "No article matches."
        a = self.by_key.get(self.key(str(args.get("title", ""))))
        if a:
            return self.text(a)
        closest = self.top(str(args.get("title", "")), 5, "title")
        return f"Error from tool `retrieve`: no article is titled; the closest titles: {'; '.join(closest)}"


def run(model, tok, samples, system, concurrency, max_turns, max_new, wiki=None):
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    queue = list(samples)
    active = []
    done = 0
    sampled = 0
    tool_seconds = 0.0
    gen_seconds = 0.0
    start = time.perf_counter()
    while queue or active:
        while queue and len(active) < concurrency:
            s = queue.pop(0)
            msgs = [{"role": "system", "content": system}] + s["messages"]
            active.append({"messages": msgs, "turns": 0})
        prompts = [
            tok.apply_chat_template(c["messages"], add_generation_prompt=True, tokenize=False)
            for c in active
        ]
        batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(
                **batch,
                max_new_tokens=max_new,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=tok.pad_token_id,
            )
        gen_seconds += time.perf_counter() - t0
        new = out[:, batch["input_ids"].shape[1]:]
        still = []
        for chain, ids in zip(active, new.tolist()):
            if eos in ids:
                ids = ids[: ids.index(eos) + 1]
            else:
                ids = [i for i in ids if i != tok.pad_token_id]
            sampled += len(ids)
            text = tok.decode(ids, skip_special_tokens=True)
            chain["messages"].append({"role": "assistant", "content": text})
            chain["turns"] += 1
            calls = CALL.findall(text)
            finished = not calls
            t0 = time.perf_counter()
            for raw in calls:
                try:
                    call = json.loads(raw)
                    name, args = call["name"], call.get("arguments", {})
                except Exception as e:
                    name, result = "", f"Error: the tool call could not be read: {e}"
                else:
                    if name == "calculator":
                        result = calc(str(args.get("expression", "")))
                    elif wiki is not None and name in ("search", "retrieve"):
                        result = wiki.call(name, args)
                    elif name == "submit_answer":
                        result = f"Answer submitted: {args.get('answer')}"
                        finished = True
                    else:
                        result = f"Error: there is no tool named `{name}`."
                chain["messages"].append({"role": "tool", "name": name, "content": result})
                if finished:
                    break
            tool_seconds += time.perf_counter() - t0
            if finished or chain["turns"] >= max_turns:
                done += 1
            else:
                still.append(chain)
        active = still
    wall = time.perf_counter() - start
    return {
        "trajectories": done,
        "sampled_tokens": sampled,
        "wall_seconds": wall,
        "generate_seconds": gen_seconds,
        "tool_seconds": tool_seconds,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--system", required=True)
    parser.add_argument("--runs", required=True, help="C:N,C:N (concurrency:samples)")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--corpus", help="the wiki corpus: search and retrieve become tools")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.model)
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    samples = [json.loads(line) for line in open(args.data) if line.strip()]
    system = open(args.system).read()
    wiki = Wiki(args.corpus) if args.corpus else None
    result = {"torch": torch.__version__, "threads": torch.get_num_threads(), "runs": {}}
    for spec in args.runs.split(","):
        c, n = (int(x) for x in spec.split(":"))
        result["runs"][str(c)] = run(
            model, tok, samples[:n], system, c, args.max_turns, args.max_new_tokens, wiki
        )
    result["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result))


if __name__ == "__main__":
    main()
