"""A stand-in for vLLM's and SGLang's HTTP APIs, for agentfly's protocol tests.

It speaks the subset of each API that agentfly uses, with the request checks and answer
shapes of the servers' own source (vLLM 0.20 `/v1/completions`, `/collective_rpc`,
`/reset_prefix_cache`; SGLang 0.5 `/generate`, `/update_weights_from_disk`), but it has no
model: it samples token ids uniformly from the first VOCAB ids (seeded by the request's
seed for vLLM, unseeded for SGLang, as those servers do by default), and reports each one's log-probability as ln(1/VOCAB). A weight push is
checked (the directory holds `config.json` and a `model.safetensors` whose header parses)
and recorded. Neither vLLM nor SGLang runs without a CUDA GPU, so this is what the
repository's tests can check against; see docs/scaling.md.

    python3 stand_in.py vllm|vllm-0.10.1|sglang VOCAB

prints the port it listens on (127.0.0.1), then serves until killed. Prompt scoring (what
agentfly's probe asks after each push: vLLM's `prompt_logprobs`, SGLang's `logprob_start_len:
0`) is real: each pushed directory is loaded with transformers (float32), so this must run
under a Python with torch and transformers (`.venv-bench`). `POST /test/stale` makes the next
push answer success without loading anything, as a server that its supervisor restarted on its
launch weights would serve them. With AGENTFLY_STAND_IN_KEY set, every request must carry
`Authorization: Bearer <key>` (401 otherwise). `vllm-0.10.1` answers
as vLLM did before `return_token_ids` (the ids only as "token_id:N" tokens). `GET /log`
gives what it was asked: each generation with the number of weight pushes before it,
pushes (with whether the directory was complete), cache resets. vLLM's development endpoints answer 404 unless VLLM_SERVER_DEV_MODE=1, as in vLLM.
"""

import json
import math
import os
import random
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API = "vllm" if sys.argv[1].startswith("vllm") else sys.argv[1]
TOKEN_IDS_FIELD = sys.argv[1] != "vllm-0.10.1"
VOCAB = int(sys.argv[2])
DEV_MODE = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
KEY = os.environ.get("AGENTFLY_STAND_IN_KEY")
LOG = {"generations": [], "pushes": [], "prefix_cache_resets": 0, "probes": 0,
       "unauthorized": 0}
LOCK = threading.Lock()
MODEL = {"model": None, "stale": False}


def load(path):
    """The pushed weights become the served ones, unless a stale push was asked for."""
    if MODEL["stale"]:
        MODEL["stale"] = False
        return
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    torch.set_num_threads(1)
    MODEL["model"] = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32)


def prompt_logprobs(ids):
    """log p(ids[i] | ids[:i]) for i >= 1, under the served weights."""
    import torch
    with torch.no_grad():
        logits = MODEL["model"](torch.tensor([ids])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
    return [None] + [logp[i - 1, ids[i]].item() for i in range(1, len(ids))]

SGLANG_SAMPLING = {
    "max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids",
    "skip_special_tokens", "no_stop_trim", "ignore_eos", "repetition_penalty",
}


def complete_dir(path):
    """Whether `path` holds a Hugging Face model: config.json and a parsable safetensors."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            json.load(f)
        with open(os.path.join(path, "model.safetensors"), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        return any(k.endswith("embed_tokens.weight") for k in header)
    except (OSError, ValueError, struct.error):
        return False


def sample(seed, max_new, stop_ids):
    rng = random.Random(seed)
    ids = []
    while len(ids) < max_new:
        ids.append(rng.randrange(VOCAB))
        if ids[-1] in stop_ids:
            return ids, True
    return ids, False


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        if KEY is None or self.headers.get("Authorization") == f"Bearer {KEY}":
            return True
        with LOCK:
            LOG["unauthorized"] += 1
        self.answer(401, {"error": {"message": "Unauthorized"}})
        return False

    def do_GET(self):
        if not self.authorized():
            return
        if self.path == "/health":
            self.answer(200, None)
        elif self.path == "/log":
            with LOCK:
                self.answer(200, LOG)
        else:
            self.answer(404, {"detail": "Not Found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if not self.authorized():
            return
        route = (API, self.path)
        if self.path == "/test/stale":
            MODEL["stale"] = True
            self.answer(200, None)
        elif route == ("sglang", "/generate") and body.get("logprob_start_len") == 0:
            self.score(body["input_ids"])
        elif route == ("vllm", "/v1/completions") and "prompt_logprobs" in body:
            self.score(body["prompt"])
        elif route == ("sglang", "/generate"):
            self.sglang_generate(body)
        elif route == ("sglang", "/update_weights_from_disk"):
            ok = complete_dir(body["model_path"])
            if ok:
                load(body["model_path"])
            with LOCK:
                LOG["pushes"].append({"path": body["model_path"], "complete": ok})
            message = "Succeeded to update model weights." if ok else "Failed to load."
            self.answer(200 if ok else 400, {"success": ok, "message": message,
                                             "num_paused_requests": 0})
        elif route == ("vllm", "/v1/completions"):
            self.vllm_complete(body)
        elif API == "vllm" and self.path in ("/collective_rpc", "/reset_prefix_cache"):
            if not DEV_MODE:
                self.answer(404, {"detail": "Not Found"})
            elif self.path == "/reset_prefix_cache":
                with LOCK:
                    LOG["prefix_cache_resets"] += 1
                self.answer(200, None)
            else:
                path = body["kwargs"]["weights_path"]
                ok = body["method"] == "reload_weights" and complete_dir(path)
                if ok:
                    load(path)
                with LOCK:
                    LOG["pushes"].append({"path": path, "complete": ok})
                if ok:
                    self.answer(200, {"results": [None]})
                else:
                    self.answer(500, {"error": {"message": f"cannot load {path}"}})
        else:
            self.answer(404, {"detail": "Not Found"})

    def score(self, ids):
        with LOCK:
            LOG["probes"] += 1
            logprobs = prompt_logprobs(ids)
        if API == "sglang":
            self.answer(200, {"text": "", "output_ids": [0], "meta_info": {
                "finish_reason": {"type": "length", "length": 1},
                "input_token_logprobs": [[lp, i, None] for lp, i in zip(logprobs, ids)]}})
        else:
            entries = [None] + [{str(i): {"logprob": lp, "rank": 1}}
                                for lp, i in zip(logprobs[1:], ids[1:])]
            self.answer(200, {"object": "text_completion", "choices": [{
                "index": 0, "text": "", "finish_reason": "length",
                "prompt_logprobs": entries}]})

    def sglang_generate(self, body):
        params = body.get("sampling_params", {})
        unknown = set(params) - SGLANG_SAMPLING
        if unknown or params.get("top_k") == 0 or not body.get("return_logprob"):
            why = f"unknown keys {sorted(unknown)}" if unknown else "top_k must be -1 or at least 1"
            self.answer(400, {"error": {"message": why}})
            return
        # SGLang seeds a request only under --enable-deterministic-inference.
        ids, stopped = sample(None, params["max_new_tokens"], params.get("stop_token_ids", []))
        with LOCK:
            LOG["generations"].append({"after_pushes": len(LOG["pushes"])})
        finish = ({"type": "stop", "matched": ids[-1]} if stopped
                  else {"type": "length", "length": len(ids)})
        lp = -math.log(VOCAB)
        self.answer(200, {"text": "", "output_ids": ids, "meta_info": {
            "finish_reason": finish, "completion_tokens": len(ids),
            "output_token_logprobs": [[lp, i, None] for i in ids]}})

    def vllm_complete(self, body):
        if body.get("logprobs") is None or not isinstance(body.get("prompt"), list):
            self.answer(400, {"object": "error", "message": "expected ids and logprobs",
                              "code": 400})
            return
        ids, stopped = sample(body["seed"], body["max_tokens"], body.get("stop_token_ids", []))
        with LOCK:
            LOG["generations"].append({"after_pushes": len(LOG["pushes"])})
        lp = -math.log(VOCAB)
        as_ids = body.get("return_tokens_as_token_ids")
        choice = {
            "index": 0, "text": "", "finish_reason": "stop" if stopped else "length",
            "stop_reason": ids[-1] if stopped else None,
            "logprobs": {"tokens": [f"token_id:{i}" if as_ids else "?" for i in ids],
                         "token_logprobs": [lp] * len(ids),
                         "top_logprobs": None, "text_offset": [0] * len(ids)}}
        if TOKEN_IDS_FIELD and body.get("return_token_ids"):
            choice["token_ids"] = ids
        self.answer(200, {"object": "text_completion", "choices": [choice]})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
