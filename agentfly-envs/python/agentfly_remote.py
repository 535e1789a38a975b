"""Serve a text environment to agentfly over its remote-environment protocol.

A gym-like environment becomes a server in a few lines::

    from agentfly_remote import serve

    class Guess:
        def __init__(self, config):          # the `create` call's config (a dict)
            self.high = config.get("high", 10)

        def reset(self, seed=None, options=None):
            # options: the chain's sample fields (a dict), or None
            self.secret = (seed or 0) % self.high
            return "Guess a number below %d." % self.high, {"valid_actions": []}

        def step(self, action):
            won = action.strip() == str(self.secret)
            return ("You won." if won else "No."), float(won), won, False, {"score": float(won)}

    if __name__ == "__main__":
        serve(Guess)          # stdio; serve(Guess, http=8000) for HTTP

``reset`` returns ``(observation, info)``; ``step`` returns gymnasium's
``(observation, reward, terminated, truncated, info)`` or gym's older
``(observation, reward, done, info)``. ``info["valid_actions"]`` (or a ``valid_actions()``
method) lists the actions that make sense now, ``info["score"]`` is the environment's
own progress score (0..1 or its own scale), reported apart from the reward, and
``info["success"]`` says whether the task was achieved (when the world knows). An optional
``close()`` frees the environment.

The protocol (docs/REMOTE-ENVS.md has it in full): requests ``{"id", "method",
"params"}`` and responses ``{"id", "result"}`` or ``{"id", "error": {"message",
"traceback"}}``; methods ``hello``, ``create``, ``reset``, ``step``, ``health``,
``close``. Over stdio each message is one line of JSON; over HTTP each request is a
``POST /<method>`` whose body is the params and whose response body is the result (or the
error, with status 400 or 500). One server holds any number of instances; each instance is
used by one chain at a time.

Over stdio the protocol owns the process's standard output: whatever the environment
prints (and its subprocesses, a JVM for instance) goes to standard error instead.

Over HTTP the server is bounded and private: instance ids are unguessable; a body over
``--max-body`` bytes (1 MiB) is refused (413), one without a length too (411); a socket
that sends nothing for ``--socket-timeout`` seconds (60) is closed; an instance nobody used
for ``--idle-timeout`` seconds (900; 0: never) is closed, and a call on a closed or unknown
instance answers 404; with ``AGENTFLY_REMOTE_TOKEN`` set (or ``--token-file``), every
request must carry ``Authorization: Bearer <token>`` (401 otherwise).
"""

import hmac
import inspect
import json
import os
import secrets
import sys
import threading
import time
import traceback

PROTOCOL = 1


class ProtocolError(Exception):
    """A request the server cannot serve (unknown method or instance, bad params)."""


class NoInstance(ProtocolError):
    """The instance named is not (or no longer) there: closed, reaped, never made."""


class Server:
    """The instances of one environment class and the protocol's methods over them."""

    def __init__(self, factory, name=None):
        self.factory = factory
        self.name = name or getattr(factory, "__name__", "env")
        self.instances = {}
        self.done = {}
        # When each instance was last used, and how many calls on it are running.
        self.used = {}
        self.busy = {}
        self.lock = threading.Lock()

    def handle(self, method, params):
        handler = getattr(self, "m_" + str(method), None)
        if handler is None:
            raise ProtocolError("unknown method %r" % (method,))
        if not isinstance(params, dict):
            raise ProtocolError("params must be an object")
        key = params.get("instance")
        with self.lock:
            if key in self.busy:
                self.busy[key] += 1
        try:
            return handler(params)
        finally:
            with self.lock:
                if key in self.busy:
                    self.busy[key] -= 1
                    self.used[key] = time.monotonic()

    def instance(self, params):
        key = params.get("instance")
        with self.lock:
            env = self.instances.get(key) if isinstance(key, str) else None
        if env is None:
            raise NoInstance("no instance %r (closed, reaped after idling, or never made)" % (key,))
        return key, env

    def reap(self, idle_seconds):
        """Closes the instances nobody has used for `idle_seconds` (not one mid-call)."""
        now = time.monotonic()
        with self.lock:
            idle = [k for k, t in self.used.items()
                    if now - t > idle_seconds and not self.busy.get(k)]
        for key in idle:
            self.m_close({"instance": key})

    def m_hello(self, params):
        return {"protocol": PROTOCOL, "name": self.name, "pid": os.getpid()}

    def m_create(self, params):
        config = params.get("config") or {}
        env = self.factory(config)
        # Unguessable: only the client that made an instance can drive it.
        key = "%s-%s" % (self.name, secrets.token_hex(16))
        with self.lock:
            self.instances[key] = env
            self.done[key] = False
            self.used[key] = time.monotonic()
            self.busy[key] = 0
        return {"instance": key}

    def m_reset(self, params):
        key, env = self.instance(params)
        seed = params.get("seed")
        sample = params.get("sample")
        reset = env.reset
        try:
            accepted = inspect.signature(reset).parameters
        except (TypeError, ValueError):
            accepted = {}
        anything = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        kwargs = {}
        if anything or "seed" in accepted:
            kwargs["seed"] = seed
        if anything or "options" in accepted:
            kwargs["options"] = sample
        out = reset(**kwargs)
        observation, info = out if isinstance(out, tuple) else (out, {})
        self.done[key] = False
        return self.step_result(env, observation, 0.0, False, False, info)

    def m_step(self, params):
        key, env = self.instance(params)
        action = params.get("action")
        if not isinstance(action, str):
            raise ProtocolError("step needs an `action` string")
        if self.done.get(key):
            raise ProtocolError("the episode is over; reset first")
        out = env.step(action)
        if len(out) == 5:
            observation, reward, terminated, truncated, info = out
        elif len(out) == 4:
            observation, reward, terminated, info = out
            truncated = False
        else:
            raise ProtocolError("step must return 4 or 5 values, got %d" % len(out))
        self.done[key] = bool(terminated or truncated)
        return self.step_result(env, observation, reward, terminated, truncated, info)

    def step_result(self, env, observation, reward, terminated, truncated, info):
        info = dict(info or {})
        valid = info.pop("valid_actions", None)
        if valid is None and callable(getattr(env, "valid_actions", None)):
            valid = env.valid_actions()
        score = info.pop("score", None)
        success = info.pop("success", None)
        result = {
            "observation": str(observation),
            "reward": float(reward or 0.0),
            "done": bool(terminated or truncated),
            "truncated": bool(truncated),
            "info": jsonable(info),
        }
        if valid is not None:
            result["valid_actions"] = [str(a) for a in valid]
        if score is not None:
            result["score"] = float(score)
        if success is not None:
            result["success"] = bool(success)
        return result

    def m_health(self, params):
        with self.lock:
            return {"ok": True, "instances": len(self.instances)}

    def m_close(self, params):
        key = params.get("instance")
        with self.lock:
            env = self.instances.pop(key, None) if isinstance(key, str) else None
            self.done.pop(key, None)
            self.used.pop(key, None)
            self.busy.pop(key, None)
        if env is not None and callable(getattr(env, "close", None)):
            env.close()
        return {}


def jsonable(value):
    """`value` as JSON can carry it: what `json` cannot encode becomes its `repr`."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, dict):
            return {str(k): jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [jsonable(v) for v in value]
        return repr(value)


def answer(server, request):
    """The response to one decoded request."""
    rid = request.get("id") if isinstance(request, dict) else None
    try:
        if not isinstance(request, dict):
            raise ProtocolError("a request must be a JSON object")
        result = server.handle(request.get("method"), request.get("params") or {})
        return {"id": rid, "result": result}, 200
    except NoInstance as e:
        return {"id": rid, "error": {"message": str(e), "code": "no_instance"}}, 404
    except ProtocolError as e:
        return {"id": rid, "error": {"message": str(e)}}, 400
    except Exception as e:  # the environment's own failure: reported, not fatal
        return {
            "id": rid,
            "error": {"message": "%s: %s" % (type(e).__name__, e), "traceback": traceback.format_exc()},
        }, 500


def serve_stdio(server):
    """Answers one request per line of stdin until it ends (the client's close)."""
    # The protocol owns stdout: point fd 1 (and `print`) at stderr, write to a private copy.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError as e:
            response = {"id": None, "error": {"message": "not JSON: %s" % e}}
        else:
            response, _ = answer(server, request)
        out.write(json.dumps(response) + "\n")
        out.flush()


def serve_http(server, port, host="127.0.0.1", max_body=1 << 20, socket_timeout=60.0,
               idle_timeout=900.0, token=None):
    """Answers `POST /<method>` (and `GET /health`) on `host:port`, a thread per request,
    within the bounds the module's documentation lists."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    expected = ("Bearer " + token).encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = socket_timeout  # applied to the socket: a silent client is cut off

        def authorized(self):
            if expected is None:
                return True
            given = (self.headers.get("Authorization") or "").encode()
            if hmac.compare_digest(given, expected):
                return True
            self.reply({"error": {"message": "a valid `Authorization: Bearer` token is needed"}}, 401)
            return False

        def do_POST(self):
            raw = self.headers.get("Content-Length")
            if raw is None:
                self.reply({"error": {"message": "a Content-Length is needed"}}, 411, close=True)
                return
            try:
                length = int(raw)
            except ValueError:
                length = -1
            if length < 0:
                self.reply({"error": {"message": "a bad Content-Length"}}, 400, close=True)
                return
            if length > max_body:
                self.reply({"error": {"message": "the body is over %d bytes" % max_body}}, 413,
                           close=True)
                return
            body = self.rfile.read(length) if length else b"{}"
            if not self.authorized():
                return
            try:
                params = json.loads(body or b"{}")
            except ValueError as e:
                self.reply({"error": {"message": "not JSON: %s" % e}}, 400)
                return
            response, status = answer(server, {"method": self.path.strip("/"), "params": params})
            self.reply(response.get("result", {"error": response.get("error")}), status)

        def do_GET(self):
            if not self.authorized():
                return
            if self.path.strip("/") == "health":
                self.reply(server.m_health({}), 200)
            else:
                self.reply({"error": {"message": "POST /<method>"}}, 404)

        def reply(self, value, status, close=False):
            data = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    if idle_timeout and idle_timeout > 0:
        def reaper():
            while True:
                time.sleep(min(idle_timeout / 2, 30.0))
                server.reap(idle_timeout)
        threading.Thread(target=reaper, daemon=True).start()
    if token is None and host not in ("127.0.0.1", "localhost", "::1"):
        print("agentfly_remote: serving on %s without a token: anyone who reaches it can "
              "drive its worlds (set AGENTFLY_REMOTE_TOKEN)" % host, file=sys.stderr, flush=True)
    # The port actually bound (0 asks the system for a free one), for whoever started us.
    print("agentfly_remote: serving %s on http://%s:%d" % (server.name, host, httpd.server_port), file=sys.stderr, flush=True)
    httpd.serve_forever()


def option(args, name, default):
    """The value after `name` on the command line, else `default`."""
    return args[args.index(name) + 1] if name in args else default


def serve(factory, http=None, host="127.0.0.1", name=None):
    """Serves instances of `factory` (called with the `create` call's config) over stdio,
    or over HTTP on port `http` when it is given (or when the command line says
    `--http PORT`; also `--host`, `--max-body`, `--socket-timeout`, `--idle-timeout`,
    `--token-file`)."""
    args = sys.argv[1:]
    if http is None and "--http" in args:
        http = int(args[args.index("--http") + 1])
    server = Server(factory, name=name)
    if http is None:
        serve_stdio(server)
        return
    token = os.environ.get("AGENTFLY_REMOTE_TOKEN")
    token_file = option(args, "--token-file", None)
    if token_file:
        with open(token_file) as f:
            token = f.read().strip()
    serve_http(
        server, http, option(args, "--host", host),
        max_body=int(option(args, "--max-body", os.environ.get("AGENTFLY_REMOTE_MAX_BODY", 1 << 20))),
        socket_timeout=float(option(args, "--socket-timeout", 60)),
        idle_timeout=float(option(args, "--idle-timeout", 900)),
        token=token or None,
    )
