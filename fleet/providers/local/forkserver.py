"""A warm fork server for the local fleet's training processes (relaunch without re-import).

Every node session of the local fleet is a fresh ``python train.py ...``; on a 2-core
machine its interpreter start plus ``import torch`` (and ``torch._dynamo``, which the
first optimizer imports) took 9.2-10.1 s before the first step (load 2-4), and a
preemption pays that again on every relaunch. The fork server is one process that has
imported the heavy libraries (:data:`PRELOAD`) once; each launch forks it, and the
child becomes the training process:

* it starts a new session (its own process group, like ``Popen(start_new_session=True)``,
  so the injector's notices and ``os.killpg`` reach it), resets signal dispositions,
  takes the launch's environment, working directory and argv, sends stdout/stderr to
  the node's log, and runs the script as ``__main__`` (``runpy.run_path``) — the script
  still imports its own modules (e.g. ``checkpointing``) with the launch's environment;
* the server reaps it and reports its exit status (``-N`` for a signal, like Popen).

:func:`spawn` is what a provider calls instead of ``subprocess.Popen``: with
``$SPOTFLEET_FORK_SERVER`` naming a running server's socket and a command of the form
``[<this python>, script.py, ...]`` it returns a :class:`ForkedProcess` (``pid``,
``poll``, ``wait``, ``returncode``, like ``Popen``); otherwise it falls back to Popen.
Start a server with :func:`start_server` (``spotfleet main`` and ``spotfleet local-fleet
run`` do, for their run).

Only the import cost is shared: nothing of a training run happens in the server, so
runs stay independent and bit-exact (the example's exact-resume checks hold).

:func:`spawn_module` forks ``python -m <module>`` the same way for a launcher that
needs a Popen-like child with the launcher's own stdout/stderr (passed over the socket,
``SCM_RIGHTS``) and without a new session — ``spotfleet main``'s node runners, whose
modules the server then preloads too (``start_server(..., preload=...)``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ENV_FORK_SERVER = "SPOTFLEET_FORK_SERVER"
#: what the server imports before it listens. ``torch._dynamo``: torch imports it lazily
#: when the first optimizer is built (``torch.optim.Optimizer.__init__``), which took 4-5 s
#: of a forked node's 4.4-5.6 s start on this 2-core machine; preloaded, the start was
#: 0.08-0.11 s (launch -> ``start`` event of examples/train_example.py)
PRELOAD = ("numpy", "torch", "torch._dynamo")
_HDR = struct.Struct("!I")


def _send(sock: socket.socket, obj: dict) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(_HDR.pack(len(data)) + data)


def _recv(sock: socket.socket, timeout: float | None = None) -> dict | None:
    """One message, or None when the peer closed; ``timeout`` (s) raises TimeoutError."""
    sock.settimeout(timeout)
    try:
        head = _recv_exact(sock, _HDR.size)
        if head is None:
            return None
        body = _recv_exact(sock, _HDR.unpack(head)[0])
        return None if body is None else json.loads(body)
    finally:  # a timeout raises TimeoutError (socket.timeout)
        sock.settimeout(None)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


# --------------------------------------------------------------------------- client


class ForkedProcess:
    """A training process forked by the server: the parts of ``Popen`` the providers use."""

    def __init__(self, pid: int, conn: socket.socket, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._conn = conn
        self._server_gone = False

    def _read_exit(self, timeout: float | None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if not self._server_gone:
            try:
                msg = _recv(self._conn, timeout)
            except TimeoutError:
                return None
            with contextlib.suppress(OSError):
                self._conn.close()
            if msg:
                self.returncode = int(msg["returncode"])
                return self.returncode
            self._server_gone = True
        # the server is gone (its launcher was killed): nobody reports this exit, and the
        # process may well be alive (until 2026-11-28 it read as killed, -9, so the
        # provider never stopped it and an orphaned node trained on): watch it ourselves
        deadline = None if timeout is None else time.monotonic() + timeout
        while _alive(self.pid):
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        self.returncode = -int(signal.SIGKILL)  # its real status went with the server
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            if self._server_gone:
                self._read_exit(0)
            else:
                ready, _, _ = select.select([self._conn], [], [], 0)
                if ready:
                    self._read_exit(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        rc = self._read_exit(timeout)
        if rc is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return rc

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (an orphan waiting for init to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _forkable(command: list[str]) -> bool:
    return (len(command) >= 2 and command[1].endswith(".py") and Path(command[1]).is_file()
            and os.path.realpath(command[0]) == os.path.realpath(sys.executable))


def spawn(command: list[str], env: dict[str, str], log_path: Path | str,
          cwd: str | None = None) -> subprocess.Popen | ForkedProcess:
    """Start ``command`` with ``env``, output to ``log_path``, in its own session.

    Through the fork server named by ``env[SPOTFLEET_FORK_SERVER]`` when the command is
    ``[python, script.py, ...]`` with this interpreter and the server answers; else
    ``subprocess.Popen`` (the same contract: own process group, stdout+stderr to the log).
    """
    path = env.get(ENV_FORK_SERVER)
    if path and _forkable(command):
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            _send(sock, {"argv": list(command[1:]), "env": dict(env), "cwd": cwd or os.getcwd(),
                         "log": str(log_path)})
            reply = _recv(sock, timeout=30.0)
            if reply and reply.get("pid"):
                return ForkedProcess(int(reply["pid"]), sock, list(command))
            sock.close()
        except (OSError, TimeoutError):
            pass  # no server (any more): an ordinary process
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=cwd)


def spawn_module(module: str, args: list[str], env: dict[str, str], cwd: str | None = None,
                 stdio_fds: tuple[int, int] = (1, 2)) -> ForkedProcess | None:
    """``python -m module *args`` forked by the server named by ``env[SPOTFLEET_FORK_SERVER]``.

    The child gets ``env`` and ``cwd``, the caller's ``stdio_fds`` as its stdout/stderr
    (inherited, like a ``Popen`` without redirection), stdin from /dev/null, Python's
    default SIGINT handling and stays in the launcher's process group (no new session:
    Ctrl-C reaches it as it reaches a Popen child). ``None`` when no server answers (no
    server, not listening yet, gone): the caller starts an ordinary process instead.
    """
    path = env.get(ENV_FORK_SERVER)
    if not path:
        return None
    sock = None
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        _send(sock, {"module": module, "argv": [module, *args], "env": dict(env), "cwd": cwd or os.getcwd(),
                     "stdio": "fds"})
        socket.send_fds(sock, [b"F"], list(stdio_fds))
        reply = _recv(sock, timeout=30.0)
        if reply and reply.get("pid"):
            return ForkedProcess(int(reply["pid"]), sock, [sys.executable, "-m", module, *args])
    except (OSError, TimeoutError):
        pass
    if sock is not None:
        sock.close()
    return None


# --------------------------------------------------------------------------- server


@dataclass
class ServerHandle:
    """A running fork server: its socket path and process; ``stop()`` ends it."""

    socket_path: str
    proc: subprocess.Popen

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)


def start_server(socket_path: str | Path, wait_ready: float = 0.0, preload: tuple[str, ...] = ()) -> ServerHandle:
    """Start ``python -m fleet.providers.local.forkserver <socket> [module ...]`` (imports in
    the background: :data:`PRELOAD`, then the ``preload`` modules; one that fails to import
    is skipped).

    Returns at once unless ``wait_ready`` > 0 (then up to that many seconds until it
    listens). Launches before it listens fall back to ordinary processes.
    """
    path = str(socket_path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    proc = subprocess.Popen([sys.executable, "-u", "-m", "fleet.providers.local.forkserver", path, *preload],
                            stdin=subprocess.DEVNULL)
    end = time.time() + wait_ready
    while time.time() < end and not os.path.exists(path) and proc.poll() is None:
        time.sleep(0.05)
    return ServerHandle(path, proc)


def _child(conn: socket.socket, req: dict, fds: list[int] | None = None) -> None:
    """In the forked child: become the process described by ``req`` (a training script with
    its output to a log, or a module with the launcher's stdout/stderr ``fds``)."""
    module = req.get("module")
    if not module:
        os.setsid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR1,
                signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    if module:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh interpreter
    # the launcher learns the pid only now, when the process group exists (os.killpg works at
    # once, as after Popen(start_new_session=True))
    with contextlib.suppress(OSError):
        _send(conn, {"pid": os.getpid()})
    conn.close()
    if fds:
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in set(fds) - {1, 2}:
            os.close(fd)
    else:
        fd = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = list(req["argv"])
    # like `python -m` (the working directory first) or `python script.py` (the script's folder)
    sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.abspath(req["argv"][0]))


def _serve(path: str, preload: tuple[str, ...] = ()) -> dict | None:
    """Accept launches until SIGTERM; returns the request in a forked child, None in the server."""
    for name in PRELOAD:
        with contextlib.suppress(Exception):  # not importable here: the child imports it (slower)
            __import__(name)
    for name in preload:  # the launcher's extra modules: a broken one only costs its import later
        with contextlib.suppress(Exception):
            __import__(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}"
    listener.bind(tmp)
    listener.listen(64)
    os.replace(tmp, path)  # appears only once bound and warm
    children: dict[int, socket.socket] = {}
    stop = False
    parent = os.getppid()  # the launcher (spotfleet main): when it is gone, so is the server

    def _term(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _term)
    # a child's exit wakes the loop at once (its launcher waits for the status: a node
    # runner's exit is on the stage's critical path), not at the next 50 ms tick
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while not stop and os.getppid() == parent:
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select([listener, wake_r], [], [], 0.05)
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(wake_r, 512):
                        pass
            if listener in ready:
                conn, _ = listener.accept()
                fds: list[int] = []
                try:
                    req = _recv(conn, timeout=10.0)
                    if req is not None and req.get("stdio") == "fds":
                        conn.settimeout(10.0)
                        _, fds, _, _ = socket.recv_fds(conn, 1, 2)
                        conn.settimeout(None)
                        if len(fds) != 2:
                            req = None
                except (OSError, TimeoutError, ValueError):
                    req = None
                if req is None:
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    for c in children.values():
                        c.close()
                    signal.set_wakeup_fd(-1)
                    os.close(wake_r)
                    os.close(wake_w)
                    _child(conn, req, fds)
                    return req
                for fd in fds:  # the child has them now
                    os.close(fd)
                children[pid] = conn  # the child says its pid; we say its exit status
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
                    conn.close()
    listener.close()
    signal.set_wakeup_fd(-1)
    os.close(wake_r)
    os.close(wake_w)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    for conn in children.values():
        conn.close()
    return None


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    req = _serve(args[0], tuple(args[1:]))
    if req is None:
        # the server: nothing to flush or clean up beyond what _serve did; skip the
        # interpreter's teardown of torch (~1-2 s that `spotfleet main` would wait for at exit)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    _run_child(req["argv"][0], req.get("module"))


def _run_child(script: str, module: str | None = None) -> None:
    """Run the training script (or ``module``) as __main__ and exit like Python does, minus
    module teardown.

    What a normal exit does that matters runs here, in Python's order: non-daemon threads
    are joined and ``threading._register_atexit`` hooks run (``threading._shutdown``), then
    the ``atexit`` handlers (checkpoint uploads, logging), then stdio is flushed. What is
    skipped is the interpreter's finalization of torch & co. (~1 s), during which the
    provider would wait for a node that has already reported its exit (and then kill it).
    """
    import atexit
    import runpy
    import threading
    import traceback

    code = 0
    try:
        if module:
            # a preloaded module (spotfleet main preloads pipelines.node_runner to warm its
            # imports) runs fresh as __main__, as `python -m` does; left in sys.modules,
            # runpy warns on every launch that it "may result in unpredictable behaviour"
            sys.modules.pop(module, None)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - reported like Python does, exit status 1
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads, runs their hooks
        atexit._run_exitfuncs()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
