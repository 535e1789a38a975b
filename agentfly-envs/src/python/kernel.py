# agentfly's Python kernel: the interpreter of one lease of a PythonSandbox, forked by the
# sandbox's supervisor (supervisor.py), which runs this file in the fork with CFG (the
# sandbox config), CHANNEL_FD (its socket to the supervisor), WORKDIR and
# PROCESS_NAMESPACE defined. It sets resource limits, drops privileges when it runs as
# root, then answers one JSON request per line on its channel with one JSON line:
#   {"op": "exec", "code": ..., "tools": [...], "max_calls": N} -> stdout, stderr, value,
#       error, cpu_seconds. While the cell runs, each call of one of `tools` (the chain's
#       tools, defined as functions in the namespace) is sent as {"op": "call", "tool": ...,
#       "args": {...}} and answered by the host with one line {"text": ..., "is_error": ...};
#       past `max_calls` calls in one cell, later ones fail here without being sent.
# The cell's own stdin is /dev/null; its stdout and stderr (also those of subprocesses)
# go to memory files that the kernel reads back, up to a cap. The notebook's namespace is
# the module `__main__`.
import ast
import builtins
import ctypes
import inspect
import json
import linecache
import math
import os
import resource
import signal
import socket
import sys
import threading
import traceback
import types

KERNEL_PID = os.getpid()
CHANNEL = socket.socket(fileno=CHANNEL_FD)  # noqa: F821 - defined by the supervisor
CHANNEL_IN = CHANNEL.makefile("r", encoding="utf-8")
CAP = int(CFG["capture_bytes"])  # noqa: F821
NOTES = []
LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38


def send(obj):
    CHANNEL.sendall((json.dumps(obj) + "\n").encode())


def setlimit(name, value):
    if value is None:
        return
    try:
        resource.setrlimit(getattr(resource, name), (value, value))
    except (ValueError, OSError) as e:
        NOTES.append(f"{name}: {e}")


setlimit("RLIMIT_CORE", 0)
setlimit("RLIMIT_AS", CFG.get("memory_bytes"))
setlimit("RLIMIT_FSIZE", CFG.get("max_file_bytes"))
setlimit("RLIMIT_NPROC", CFG.get("max_processes"))
setlimit("RLIMIT_NOFILE", CFG.get("max_open_files"))
setlimit("RLIMIT_CPU", CFG.get("cpu_seconds_total"))

class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities():
    """Still uid 0 (root of a user namespace): every capability dropped for good, so the
    code cannot undo the read-only mounts or the private /tmp, and no program it runs as
    uid 0 gets them back."""
    # SECBIT_NOROOT and _NO_SETUID_FIXUP on, KEEP_CAPS off, each locked.
    if LIBC.prctl(28, 0b101111, 0, 0, 0) != 0:  # PR_SET_SECUREBITS
        raise OSError(ctypes.get_errno(), "PR_SET_SECUREBITS")
    data = (CapData * 2)()
    if LIBC.capset(ctypes.byref(CapHeader(0x20080522, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


if os.geteuid() == 0:
    # No capability can come back through a program it runs, whatever its file says.
    for cap in range(64):
        LIBC.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP; past the last one: EINVAL
    LIBC.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
UID = CFG.get("uid")
if UID is not None and os.geteuid() == 0:
    os.setgroups([])
    os.setgid(UID)
    os.setuid(UID)  # no capability is left to a non-root uid
elif os.geteuid() == 0:
    drop_capabilities()
DEDICATED_UID = UID is not None and os.getuid() == UID and UID != 0
# No program it starts gains privileges (set-uid binaries run as the caller); and the
# process may read its own /proc entries again (changing uid made it undumpable).
LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
os.chdir(WORKDIR)  # noqa: F821
os.environ["HOME"] = os.environ["TMPDIR"] = WORKDIR  # noqa: F821


class CpuTimeLimit(Exception):
    """The cell used up its CPU seconds."""


def on_xcpu(signum, frame):
    raise CpuTimeLimit(f"CPU time limit of {CFG['cpu_seconds_per_call']} s exceeded")


signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an over-large write fails with EFBIG
signal.signal(signal.SIGXCPU, on_xcpu)

OUT = os.fdopen(os.memfd_create("stdout"), "w+b")
ERR = os.fdopen(os.memfd_create("stderr"), "w+b")
os.dup2(OUT.fileno(), 1)
os.dup2(ERR.fileno(), 2)
sys.stdin = open(os.devnull)


def cpu_used():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Notepad:
    """A scratch notepad (as in L0): a todo list, facts, and a draft answer.

    notepad.add_todo("..."), notepad.done(0), notepad.add_fact("..."),
    notepad.write_draft("..."); print(notepad) shows it all.
    """

    def __init__(self):
        self.todo = []
        self.facts = []
        self.draft = ""

    def add_todo(self, item):
        self.todo.append([str(item), False])
        return len(self.todo) - 1

    def done(self, index):
        self.todo[index][1] = True

    def add_fact(self, fact):
        self.facts.append(str(fact))

    def write_draft(self, text):
        self.draft = str(text)

    def __repr__(self):
        lines = ["# todo"]
        lines += [f"[{'x' if d else ' '}] {i}. {t}" for i, (t, d) in enumerate(self.todo)]
        lines += ["# facts"] + [f"- {f}" for f in self.facts]
        lines += ["# draft", self.draft]
        return "\n".join(lines)


class ToolError(Exception):
    """A tool called from code failed; the message says why."""


CALL_LOCK = threading.Lock()
# The kernel's own functions run with these globals, a cell with its namespace's.
KERNEL_GLOBALS = globals()
CALLS = {"made": 0, "max": None, "seq": None, "refused": 0}


def call_tool(name, args):
    if os.getpid() != KERNEL_PID:
        raise ToolError(f"{name}: tools can be called only from the notebook's own process")
    # The first call past the limit goes to the host, which refuses and records it; later
    # ones are refused here and only counted.
    limit = CALLS["max"]
    if limit is not None and CALLS["made"] > limit:
        CALLS["refused"] += 1
        raise ToolError(f"Error: too many tool calls from one `code_interpreter` call "
                        f"(the limit is {limit})")
    CALLS["made"] += 1
    try:
        request = json.dumps({"op": "call", "tool": name, "args": args,
                              "seq": CALLS["seq"]})
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: the arguments must be JSON values (str, int, float, "
                        f"bool, None, list, dict): {e}") from None
    with CALL_LOCK:
        CHANNEL.sendall((request + "\n").encode())
        line = CHANNEL_IN.readline()
    if not line:
        os._exit(3)  # the supervisor is gone
    answer = json.loads(line)
    if answer.get("is_error"):
        raise ToolError(answer.get("text", ""))
    return answer.get("text", "")


PY_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
            "array": "list", "object": "dict"}


def type_name(schema):
    kind = schema.get("type")
    if isinstance(kind, list):
        names = [PY_TYPES.get(k, "None" if k == "null" else k) for k in kind]
        return " | ".join(names)
    return PY_TYPES.get(kind, "object")


def make_tool(spec):
    """A Python function with the tool's parameters and docstring that calls it."""
    name = spec["name"]
    schema = spec.get("parameters") or {}
    props = schema.get("properties") or {}
    required = [p for p in schema.get("required") or [] if p in props]
    optional = [p for p in props if p not in required]
    usable = all(p.isidentifier() for p in props)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    if usable:
        params = [inspect.Parameter(p, kind) for p in required]
        params += [inspect.Parameter(p, kind, default=None) for p in optional]
    else:
        params = [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    signature = inspect.Signature(params)

    def tool(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{name}{signature}: {e}") from None
        given = dict(bound.arguments)
        if not usable:
            given = dict(given.get("kwargs", {}))
        payload = {k: v for k, v in given.items() if not (k in optional and v is None)}
        return call_tool(name, payload)

    lines = [spec.get("description", "").strip(), ""]
    if props:
        lines.append("Args:")
        for p, sub in props.items():
            text = (sub.get("description") or "").strip()
            lines.append(f"    {p} ({type_name(sub)}): {text}")
    lines.append("Returns the tool's text; raises ToolError when the call fails.")
    tool.__name__ = tool.__qualname__ = name
    tool.__signature__ = signature
    tool.__doc__ = "\n".join(lines)
    return tool


def define_tools(tools):
    for spec in tools or []:
        name = spec.get("name", "")
        if name.isidentifier():
            NS[name] = make_tool(spec)


def fresh_namespace():
    main = types.ModuleType("__main__")
    main.__dict__.update({"__builtins__": builtins, "notepad": Notepad(),
                          "ToolError": ToolError})
    sys.modules["__main__"] = main
    return main.__dict__


NS = fresh_namespace()


def kill_leftovers():
    # With a uid or a PID namespace of its own, every other process it can signal was
    # started by a cell (the namespace's first process ignores it).
    if DEDICATED_UID or PROCESS_NAMESPACE:  # noqa: F821
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # Reap this kernel's own dead children, which would otherwise count against
    # RLIMIT_NPROC as zombies.
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break


def read_capture(f):
    size = os.fstat(f.fileno()).st_size
    f.seek(0)
    data = f.read(CAP)
    f.seek(0)
    f.truncate()
    return data.decode("utf-8", errors="replace"), size


def cell_traceback(tb):
    """The traceback from the cell's first frame on, without the kernel's own frames (a
    tool function's wrapper and `call_tool`): what the model reads names its own code."""
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    kept = []
    while tb is not None:
        if tb.tb_frame.f_globals is not KERNEL_GLOBALS:
            kept.append(tb)
        tb = tb.tb_next
    rebuilt = None
    for t in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return rebuilt


def format_error(e):
    seen = set()
    link = e
    while link is not None and id(link) not in seen:  # chained exceptions too
        seen.add(id(link))
        link.__traceback__ = cell_traceback(link.__traceback__)
        link = link.__cause__ or link.__context__
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))


def value_repr(v):
    try:
        text = repr(v)
    except BaseException as e:  # noqa: BLE001 - a broken __repr__ is the cell's problem
        return f"<repr failed: {type(e).__name__}: {e}>"
    return text[: CAP] if len(text) > CAP else text


def run_cell(code):
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)
    start = cpu_used()
    soft = math.ceil(start) + int(CFG["cpu_seconds_per_call"])
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ValueError, OSError):
        pass
    linecache.cache["<cell>"] = (len(code), None, code.splitlines(True), "<cell>")
    value = None
    error = None
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), NS)
        if last is not None:
            result = eval(compile(last, "<cell>", "eval"), NS)
            if result is not None:
                value = value_repr(result)
    except BaseException as e:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included
        error = format_error(e)
    if os.getpid() != KERNEL_PID:  # a forked child that ran off the end of the cell
        os._exit(0)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a full disk or a closed stream loses only output
            pass
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))  # the kernel's own work
    except (ValueError, OSError):
        pass
    kill_leftovers()
    stdout, stdout_bytes = read_capture(OUT)
    stderr, stderr_bytes = read_capture(ERR)
    return {
        "stdout": stdout,
        "stdout_bytes": stdout_bytes,
        "stderr": stderr,
        "stderr_bytes": stderr_bytes,
        "value": value,
        "error": error,
        "cpu_seconds": cpu_used() - start,
    }


# A first cell run before the lease begins: the pages it touches are this process's own
# (copied from the supervisor's) by the time the chain's first cell comes.
run_cell("None")
send({"ready": True, "uid": os.getuid(), "notes": NOTES})
for line in CHANNEL_IN:
    request = json.loads(line)
    if request.get("op") == "exec":
        define_tools(request.get("tools"))
        CALLS["made"], CALLS["max"], CALLS["refused"] = 0, request.get("max_calls"), 0
        CALLS["seq"] = request.get("seq")
        result = run_cell(request["code"])
        result["seq"] = CALLS["seq"]
        result["refused_calls"] = CALLS["refused"]
        send(result)
    else:
        send({"ok": False, "error": f"unknown op {request.get('op')!r}"})
os._exit(0)
