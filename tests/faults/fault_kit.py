"""Real faults for the checkpoint-path tests (issue 9): a small full filesystem and a
frozen S3 endpoint.

* ``mounted_tmpfs(path, size_bytes)``: a real tmpfs of a few MiB (needs root / CAP_SYS_ADMIN;
  the caller skips with the reason when ``mount`` is not permitted). ``fill(path)`` then
  writes a filler file until the kernel answers ENOSPC.
* ``FreezableProxy``: a loopback TCP proxy in front of the real radosgw. ``freeze()`` makes
  it stop forwarding bytes in both directions and accept new connections without ever
  answering -- what a client sees when the S3 endpoint hangs (a black-holed network or a
  stalled server). ``thaw()`` resumes forwarding. Connections stay open while frozen, so
  the client's own socket timeouts are what ends a request.

Nothing here mocks the code under test: the store, the training process and the server
are the real ones.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path


class MountNotPermitted(RuntimeError):
    """``mount -t tmpfs`` failed (not root, or no CAP_SYS_ADMIN in this container)."""


@contextlib.contextmanager
def mounted_tmpfs(path: str | os.PathLike[str], size_bytes: int = 2 << 20) -> Iterator[Path]:
    """Mount a tmpfs of ``size_bytes`` at ``path`` for the duration of the block."""
    target = Path(path)
    target.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        raise MountNotPermitted("no `mount` binary")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(target)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise MountNotPermitted(f"mount -t tmpfs failed ({proc.returncode}): {proc.stderr.strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def fill(path: str | os.PathLike[str], name: str = "filler.bin", byte: bytes = b"\0") -> int:
    """Append ``byte`` to ``path/name`` until the filesystem is full (ENOSPC); return the
    bytes written. Filling an existing file too (e.g. with newlines) also uses up the
    slack in its last page, so that its next append fails."""
    written = 0
    chunk = byte * (64 << 10)
    fd = os.open(Path(path) / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            try:
                n = os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: max(1, len(chunk) // 16)]
                continue
            written += n
    finally:
        os.close(fd)
    return written


def free_bytes(path: str | os.PathLike[str]) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class FreezableProxy:
    """TCP proxy 127.0.0.1:<port> -> ``upstream`` whose forwarding can be frozen.

    ``endpoint_url`` is what the client uses instead of the server's own URL.
    """

    def __init__(self, upstream_host: str, upstream_port: int):
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._running = threading.Event()  # set: forwarding; clear: frozen
        self._running.set()
        self._closed = threading.Event()
        self._socks: list[socket.socket] = []
        #: when set, each connection forwards at most this many bytes per second (a slow link)
        self.rate_bytes_per_second: float | None = None
        self._lock = threading.Lock()
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True,
                                               name="fault-proxy-accept")
        self._accept_thread.start()

    @classmethod
    def for_url(cls, url: str) -> FreezableProxy:
        hostport = url.split("://", 1)[1].split("/", 1)[0]
        host, _, port = hostport.rpartition(":")
        return cls(host, int(port))

    @property
    def frozen(self) -> bool:
        return not self._running.is_set()

    def freeze(self) -> None:
        """Stop moving bytes (both directions, every connection, new ones too)."""
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    def close(self) -> None:
        self._closed.set()
        self._running.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()

    def __enter__(self) -> FreezableProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _addr = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True,
                             name="fault-proxy-conn").start()

    def _serve(self, client: socket.socket) -> None:
        # a frozen proxy accepts but never connects upstream nor answers
        while not self._running.wait(0.05):
            if self._closed.is_set():
                client.close()
                return
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        with self._lock:
            self._socks += [client, upstream]
        peers = {client: upstream, upstream: client}
        try:
            while not self._closed.is_set():
                if not self._running.is_set():
                    self._running.wait(0.05)
                    continue
                readable, _w, _x = select.select(list(peers), [], [], 0.05)
                for src in readable:
                    if not self._running.is_set():
                        break  # frozen between select and read: leave the bytes queued
                    rate = self.rate_bytes_per_second
                    data = src.recv(16 << 10 if rate else 256 << 10)
                    if not data:
                        return
                    peers[src].sendall(data)
                    if rate:
                        time.sleep(len(data) / rate)
        except OSError:
            return
        finally:
            for s in (client, upstream):
                with contextlib.suppress(OSError):
                    s.close()


def use_s3_through(monkeypatch, endpoint_url: str, access_key: str, secret_key: str,  # noqa: ANN001
                   spill_dir: os.PathLike[str] | str) -> None:
    """Point every S3 store of the test (and the processes it starts) at ``endpoint_url``
    (e.g. a :class:`FreezableProxy` in front of the radosgw) with 2 s timeouts, 2 attempts
    and ``spill_dir`` as the local spill area."""
    for k, v in {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key,
                 "AWS_ENDPOINT_URL": endpoint_url, "AWS_REGION": "us-east-1",
                 "SPOTFLEET_S3_CONNECT_TIMEOUT_SECONDS": "2",
                 "SPOTFLEET_S3_READ_TIMEOUT_SECONDS": "2", "SPOTFLEET_S3_MAX_ATTEMPTS": "2",
                 "SPOTFLEET_SPILL_DIR": str(spill_dir)}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
