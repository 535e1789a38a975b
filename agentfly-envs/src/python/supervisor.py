# agentfly's sandbox supervisor: one per PythonSandbox instance, the fork server of its
# interpreters. It never runs a cell. Each lease gets a kernel forked from it, so no chain
# sees what an earlier chain did to its interpreter (threads, patched modules, environment,
# signal handlers, files); the kernel lives in a PID namespace of its own where the system
# allows, so killing it kills every process it started.
#
# Started by the host as `python3 -I -u -c SUPERVISOR CONFIG KERNEL_SOURCE` (under
# `unshare --net --mount`, with `--user --map-root-user` when the host is not root, where
# the system allows). It talks to the host over its stdin/stdout, one JSON object per line:
#   -> {"ready": true, "isolation": {...}, "notes": [...], "python": ...} once started
#   {"op": "exec", ...}  relayed to the kernel; the kernel's {"op": "call"} lines are relayed
#                        to the host and the host's answers back; the kernel's result ends it.
#                        If the kernel dies instead: {"died": why} (a fresh kernel is ready).
#   {"op": "kill"}       the kernel and all its processes killed, a fresh one forked -> {"killed": true}
#   {"op": "reset"}      the same, and a fresh /tmp and working directory -> {"ok": true}, sent at
#                        once: the filesystem and the kernel are made while the host goes on
#   {"op": "ping"}       -> {"ok": true}
# A message with "fatal": true says no fresh kernel could be made; the supervisor has ended.
# The host's channel (this process's stdin and stdout) is closed in every kernel: a cell
# reaches the supervisor only through its own kernel's socket, which dies with the lease.
import ctypes
import json
import os
import resource
import select
import selectors
import shutil
import signal
import socket
import sys

# What the kernel imports, loaded once here so that each fork starts warm.
import ast  # noqa: F401
import builtins  # noqa: F401
import inspect  # noqa: F401
import io  # noqa: F401
import linecache  # noqa: F401
import math  # noqa: F401
import threading  # noqa: F401
import traceback  # noqa: F401
import types  # noqa: F401

CFG = json.loads(sys.argv[1])
KERNEL_CODE = compile(sys.argv[2], "<agentfly-kernel>", "exec")
del sys.argv[1:]
MAX_LINE = 16 << 20
NOTES = []
LIBC = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (asm-generic)


def check(result, what):
    if result != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    check(LIBC.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags),
                     enc(data)), f"mount {target}")


def umount(target):
    LIBC.umount2(target.encode(), MNT_DETACH)


class MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


# Not dumpable: a kernel running as this user cannot ptrace this process or open its
# /proc entries (its file descriptors: the host's channel).
LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)

# The working directory: on the private /tmp where there is one, else the host's directory.
WORKDIR = CFG["host_workdir"]
PRIVATE_WORKDIR = "/tmp/work"
UID = CFG.get("uid")
# The host started this process in a mount namespace of its own: mounts here are private.
NAMESPACES = bool(CFG.get("namespaces")) and os.geteuid() == 0
ISOLATION = {
    "network_namespace": False,
    "private_tmp": False,
    "read_only_host": False,
    "process_namespace": False,
    "dedicated_uid": False,
}
SCRATCH = ["/tmp", "/var/tmp", "/dev/shm"]


def network_isolated():
    try:
        return all(name == "lo" for _, name in socket.if_nameindex())
    except OSError as e:
        NOTES.append(f"network interfaces: {e}")
        return False


def read_only_host():
    """Every mount of the host read-only in this namespace (the scratch ones come after)."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    LIBC.syscall.restype = ctypes.c_long
    result = LIBC.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), b"/",
                          ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr),
                          ctypes.c_size_t(ctypes.sizeof(attr)))
    check(result, "mount_setattr / read-only")


MOUNTED = []


def fresh_scratch():
    """A new bounded tmpfs on /tmp (also seen at /var/tmp and /dev/shm) that holds the
    working directory: the last lease's files are gone with the filesystem they were on."""
    while MOUNTED:
        umount(MOUNTED.pop())
    options = f"size={int(CFG['max_disk_bytes'])},nr_inodes={int(CFG['max_files'])},mode=1777"
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, options)
    MOUNTED.append("/tmp")
    for target in SCRATCH[1:]:
        if os.path.isdir(target):
            mount("/tmp", target, None, MS_BIND)
            MOUNTED.append(target)
    make_workdir()


def make_workdir():
    os.makedirs(WORKDIR, mode=0o700, exist_ok=True)
    if UID is not None:
        os.chown(WORKDIR, UID, UID)
    os.chmod(WORKDIR, 0o700)


def empty_workdir():
    """Without a mount namespace: the working directory emptied, as the kernel's user."""
    for name in os.listdir(WORKDIR):
        path = os.path.join(WORKDIR, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except OSError:
                pass


ISOLATION["network_namespace"] = network_isolated()
if NAMESPACES:
    try:
        read_only_host()
        ISOLATION["read_only_host"] = True
    except OSError as e:
        NOTES.append(str(e))
    try:
        WORKDIR = PRIVATE_WORKDIR
        fresh_scratch()
        ISOLATION["private_tmp"] = True
    except OSError as e:
        NOTES.append(f"a private /tmp: {e}")
        WORKDIR = CFG["host_workdir"]
        make_workdir()
else:
    make_workdir()
os.chdir("/")


def probe_pid_namespace():
    """Can a kernel get a PID namespace of its own (and the next fork go back to this
    one's)? Tried in a child, so that a half success changes nothing here."""
    pid = os.fork()
    if pid == 0:
        own = os.open("/proc/self/ns/pid", os.O_RDONLY)
        works = LIBC.unshare(CLONE_NEWPID) == 0 and LIBC.setns(own, CLONE_NEWPID) == 0
        os._exit(0 if works else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


ISOLATION["process_namespace"] = NAMESPACES and probe_pid_namespace()
OWN_PID_NAMESPACE = os.open("/proc/self/ns/pid", os.O_RDONLY)
ISOLATION["dedicated_uid"] = UID is not None and os.geteuid() == 0


def describe_exit(code):
    if code >= 128:
        sig = code - 128
        try:
            name = signal.Signals(sig).name
            return f"the interpreter exited (signal: {sig} ({name}))"
        except ValueError:
            return f"the interpreter exited (signal: {sig})"
    return f"the interpreter exited (exit status: {code})"


def exit_code(status):
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def init_of_namespace(kernel_sock):
    """Process 1 of the kernel's PID namespace: reaps whatever ends there, and exits with
    the kernel's status when the kernel ends (the namespace dies with it). It dies with
    the supervisor, which kills it to end the namespace."""
    LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    try:
        check(LIBC.unshare(CLONE_NEWNS), "unshare")
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError as e:
        NOTES.append(str(e))
    kernel = os.fork()
    if kernel == 0:
        run_kernel(kernel_sock)
    kernel_sock.close()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == kernel:
            os._exit(exit_code(status))


def run_kernel(kernel_sock):
    """In the kernel's process: nothing of the host's channel is left, then the kernel."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        fd = kernel_sock.detach()
        if fd != 3:
            os.dup2(fd, 3)
            os.close(fd)
        os.set_inheritable(3, False)
        os.closerange(4, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        # The kernel's own code looks builtins up in a copy: a cell that replaces
        # `builtins.len` changes its own world, not the kernel's.
        scope = {"__name__": "agentfly_kernel", "__builtins__": dict(vars(builtins)),
                 "CFG": CFG,
                 "CHANNEL_FD": 3, "WORKDIR": WORKDIR,
                 "PROCESS_NAMESPACE": ISOLATION["process_namespace"]}
        exec(KERNEL_CODE, scope)
    except BaseException:  # noqa: BLE001 - any failure here is the kernel's death
        traceback.print_exc(file=sys.__stderr__)
    os._exit(70)


class KernelStartError(Exception):
    """A fresh kernel did not say it was ready."""


class Kernel:
    """A kernel forked for one lease (restarted within it when it dies or runs over). It
    starts while the supervisor goes on; its first message is awaited when it is first
    needed."""

    def __init__(self):
        parent_end, kernel_end = socket.socketpair()
        namespace = ISOLATION["process_namespace"]
        if namespace:
            # The next child is the first process of a new PID namespace; the one after
            # it goes back to this process's own (setns below).
            check(LIBC.unshare(CLONE_NEWPID), "unshare")
        self.pid = os.fork()
        if self.pid == 0:
            parent_end.close()
            if namespace:
                init_of_namespace(kernel_end)
            os.setsid()
            run_kernel(kernel_end)
        if namespace:
            check(LIBC.setns(OWN_PID_NAMESPACE, CLONE_NEWPID), "setns")
        kernel_end.close()
        self.sock = parent_end
        self.buffer = b""
        self.outgoing = b""
        self.ready = False

    def ensure_ready(self):
        """Its first line says it started; else it is killed and the reason raised."""
        if self.ready:
            return
        self.sock.settimeout(float(CFG["startup_seconds"]))
        data = b""
        try:
            while b"\n" not in data and len(data) < MAX_LINE:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
        except OSError as e:
            data += f" ({e})".encode()
        line, self.buffer = take_line(data)
        try:
            ready = json.loads(line) if line is not None else {}
        except ValueError:
            ready = {}
        if not isinstance(ready, dict) or ready.get("ready") is not True:
            code = self.kill(wait=True)
            raise KernelStartError(f"the interpreter did not start ({describe_exit(code)}): "
                                   f"{data[:2000].decode(errors='replace')}")
        NOTES.extend(n for n in ready.get("notes", []) if n not in NOTES)
        self.sock.setblocking(False)
        self.ready = True

    def kill(self, wait=False):
        """Kills it and all it started (with its namespace). With `wait`, returns how it
        ended; else it is reaped later."""
        if self.pid is None:
            return None
        try:
            if ISOLATION["process_namespace"]:
                os.kill(self.pid, signal.SIGKILL)
            else:
                os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.sock.close()
        pid, self.pid = self.pid, None
        if not wait:
            DYING.append(pid)
            return None
        _, status = os.waitpid(pid, 0)
        return exit_code(status)


DYING = []


def reap_dying():
    """Collects the kernels killed earlier that have ended."""
    for pid in list(DYING):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            DYING.remove(pid)


def kill_uid():
    """Every process of the sandbox's uid killed, atomically, by a child that takes it."""
    if UID is None or os.geteuid() != 0 or ISOLATION["process_namespace"]:
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.setuid(UID)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


HOST_IN = 0
HOST_OUT = 1
host_buffer = b""


def send_host(obj):
    data = (json.dumps(obj) + "\n").encode()
    while data:
        data = data[os.write(HOST_OUT, data):]


def take_line(buffer):
    """(line, rest) when the buffer holds a whole line, else (None, buffer)."""
    end = buffer.find(b"\n")
    if end < 0:
        return None, buffer
    return buffer[:end], buffer[end + 1:]


def fresh_kernel(failed, ready=False):
    """A new kernel (with `ready`, once it said so); if none starts, the host gets `failed`
    with the reason, and this supervisor ends (its instance is replaced)."""
    try:
        new = Kernel()
        if ready:
            new.ensure_ready()
        return new
    except (KernelStartError, OSError) as e:
        failed["error"] = str(e)
        failed["fatal"] = True
        send_host(failed)
        os._exit(3)


def end_kernel(wait=False):
    unwatch_kernel()
    code = kernel.kill(wait)
    kill_uid()
    return code


def watch_kernel(writing):
    events = selectors.EVENT_READ | (selectors.EVENT_WRITE if writing else 0)
    try:
        selector.modify(kernel.sock, events, "kernel")
    except KeyError:
        selector.register(kernel.sock, events, "kernel")


def unwatch_kernel():
    try:
        selector.unregister(kernel.sock)
    except (KeyError, ValueError):
        pass


def kernel_died(why):
    """The kernel ended mid-cell: a fresh one (files kept), and the host told why."""
    global kernel
    code = end_kernel(wait=True)
    why = why or describe_exit(code)
    kernel = fresh_kernel({"died": why})
    send_host({"died": why})


def host_ops(line):
    """One request from the host, outside a cell; True when a cell started."""
    global kernel
    try:
        request = json.loads(line)
    except ValueError:
        request = None
    op = request.get("op") if isinstance(request, dict) else None
    if op == "exec":
        try:
            kernel.ensure_ready()
        except KernelStartError as e:
            send_host({"died": str(e), "fatal": True})
            os._exit(3)
        global cell_seq
        cell_seq += 1
        request["seq"] = cell_seq
        kernel.outgoing += (json.dumps(request) + "\n").encode()
        watch_kernel(True)
        return True
    if op == "kill":
        end_kernel()
        kernel = fresh_kernel({"killed": False})
        send_host({"killed": True})
    elif op == "reset":
        # Answered at once: the fresh filesystem and kernel are made while the host
        # goes on (the next request waits for them if it comes first).
        end_kernel()
        send_host({"ok": True})
        try:
            if ISOLATION["private_tmp"]:
                fresh_scratch()
            else:
                empty_workdir()
        except OSError as e:
            send_host({"died": f"no fresh working directory: {e}", "fatal": True})
            os._exit(3)
        kernel = fresh_kernel({"died": "no fresh interpreter"})
    elif op == "ping":
        send_host({"ok": True})
    else:
        send_host({"ok": False, "error": f"unknown request {line[:200]!r}"})
    return False


def is_kill(line):
    try:
        message = json.loads(line)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("op") == "kill"


def on_kernel_line(line):
    """A line from the kernel mid-cell: a tool call to relay, or the cell's result; True
    while the cell goes on."""
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        kernel_died("it sent something that is not a JSON object")
        return False
    if message.pop("seq", None) != cell_seq:
        return True  # left over from an earlier cell of this lease
    send_host(message)
    if message.get("op") == "call":
        return True
    unwatch_kernel()
    return False


selector = selectors.DefaultSelector()
selector.register(HOST_IN, selectors.EVENT_READ, "host")
kernel = fresh_kernel({"ready": False}, ready=True)
send_host({
    "ready": True,
    "isolation": ISOLATION,
    "workdir": WORKDIR,
    "notes": NOTES,
    "python": sys.version.split()[0],
})

in_cell = False
cell_seq = 0
while True:
    reap_dying()
    for key, mask in selector.select():
        if key.data == "kernel" and key.fileobj is not kernel.sock:
            continue  # the kernel it was about has been replaced
        if key.data == "host":
            chunk = os.read(HOST_IN, 1 << 16)
            if not chunk:
                end_kernel()
                os._exit(0)
            host_buffer += chunk
            while True:
                line, host_buffer = take_line(host_buffer)
                if line is None:
                    break
                if not in_cell:
                    in_cell = host_ops(line)
                elif is_kill(line):
                    end_kernel()
                    kernel = fresh_kernel({"killed": False})
                    send_host({"killed": True})
                    in_cell = False
                else:  # the host's answer to a tool call
                    kernel.outgoing += line + b"\n"
                    watch_kernel(True)
            if len(host_buffer) > MAX_LINE:
                os._exit(2)  # the host is not speaking the protocol
            continue
        # The kernel's socket.
        if mask & selectors.EVENT_WRITE and kernel.outgoing:
            try:
                sent = kernel.sock.send(kernel.outgoing)
                kernel.outgoing = kernel.outgoing[sent:]
            except BlockingIOError:
                pass
            except OSError:
                kernel.outgoing = b""
            if not kernel.outgoing:
                watch_kernel(False)
        if mask & selectors.EVENT_READ:
            try:
                chunk = kernel.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                if in_cell:
                    kernel_died(None)
                    in_cell = False
                continue
            kernel.buffer += chunk
            while in_cell:
                line, kernel.buffer = take_line(kernel.buffer)
                if line is None:
                    break
                in_cell = on_kernel_line(line)
            if in_cell and len(kernel.buffer) > MAX_LINE:
                kernel_died(f"it sent a message over {MAX_LINE} bytes")
                in_cell = False
