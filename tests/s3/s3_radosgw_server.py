"""A real S3-compatible server for tests and benchmarks: Ceph's RADOS Gateway on loopback.

One monitor, one BlueStore OSD on a sparse file, and radosgw (beast frontend) on
127.0.0.1 ports picked free at run time; ``auth none`` (cephx off) with
``ms_mon_client_mode = crc secure``; the BlueStore block file sits outside ``osd_data``.
Daemons run in the foreground as children of this process and are stopped by PID.
Cold start is ~10-20 s on 2 cores. Debian packages: ceph-mon ceph-osd radosgw ceph-common
(``scripts/install_test_services.sh`` installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "monmaptool", "ceph")
ACCESS_KEY = "SPOTFLEETTESTACCESS1"
SECRET_KEY = "spotfleet-test-secret-key-0123456789abcd"


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the test process dies (even SIGKILLed),
    so no daemon outlives a crashed or timed-out test run (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RadosGateway:
    """Start/stop a single-node Ceph cluster with radosgw under ``workdir``.

    After ``start()``: ``endpoint_url``, ``access_key``, ``secret_key``, ``region``.
    """

    region = "us-east-1"

    def __init__(self, workdir: str | os.PathLike[str], block_size_bytes: int = 10 << 30):
        self.dir = Path(workdir)
        self.block_size_bytes = block_size_bytes
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self.endpoint_url = ""
        self._procs: list[tuple[str, subprocess.Popen]] = []
        self.conf = self.dir / "ceph.conf"

    # ---- helpers ---------------------------------------------------------------------
    def _write_conf(self, mon_port: int, rgw_port: int, fsid: str) -> None:
        d = self.dir
        self.conf.write_text(f"""[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
ms_mon_client_mode = crc secure
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
mon data avail warn = 1
mon data avail crit = 0
osd crush chooseleaf type = 0
run dir = {d}/run
admin socket = {d}/run/$name.asok
log file = {d}/log/$name.log
pid file = {d}/run/$name.pid
mon data = {d}/mon/$id
osd data = {d}/osd/$id
osd objectstore = bluestore
bluestore block path = {d}/block-$id
bluestore block create = true
bluestore block size = {self.block_size_bytes}
osd memory target = 939524096
bluestore cache autotune = false
bluestore cache size = 134217728
osd max object name len = 460
osd max object namespace len = 64
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
rgw data = {d}/rgw
rgw thread pool size = 64
""")

    def _run(self, *args: str, timeout: float = 60) -> str:
        proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): "
                               f"{proc.stderr.strip()[-2000:]}\n{self.log_tail()}")
        return proc.stdout

    def _spawn(self, name: str, *args: str) -> None:
        log = open(self.dir / "log" / f"{name}.stderr", "wb")  # noqa: SIM115 (kept for the daemon)
        proc = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_parent)
        log.close()
        self._procs.append((name, proc))

    def _check_alive(self) -> None:
        for name, proc in self._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} during start-up\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for path in sorted((self.dir / "log").glob("*")):
            try:
                text = path.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(out)

    # ---- lifecycle -------------------------------------------------------------------
    def start(self, timeout_seconds: float = 180.0) -> RadosGateway:
        missing = missing_binaries()
        if missing:
            raise FileNotFoundError(f"Ceph binaries missing: {', '.join(missing)}")
        for sub in ("mon/a", "osd/0", "run", "log", "rgw"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        mon_port, rgw_port = _free_port(), _free_port()
        fsid = str(uuid.uuid4())
        self._write_conf(mon_port, rgw_port, fsid)
        conf = str(self.conf)
        end = time.monotonic() + timeout_seconds
        try:
            monmap = str(self.dir / "monmap")
            self._run("monmaptool", "--create", "--addv", "a", f"[v2:127.0.0.1:{mon_port}]",
                      "--fsid", fsid, monmap)
            self._run("ceph-mon", "-c", conf, "--mkfs", "-i", "a", "--monmap", monmap)
            self._spawn("mon.a", "ceph-mon", "-f", "-c", conf, "-i", "a")
            self._run("ceph", "-c", conf, "--connect-timeout", "60", "osd", "create", timeout=90)
            self._run("ceph-osd", "-c", conf, "-i", "0", "--mkfs", timeout=120)
            self._spawn("osd.0", "ceph-osd", "-f", "-c", conf, "-i", "0")
            self._spawn("client.rgw.a", "radosgw", "-f", "-c", conf, "-n", "client.rgw.a")
            url = f"http://127.0.0.1:{rgw_port}"
            while True:
                self._check_alive()
                try:
                    with urllib.request.urlopen(url + "/", timeout=2) as resp:
                        if resp.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.monotonic() > end:
                    raise TimeoutError(f"radosgw did not answer on {url} within {timeout_seconds:.0f} s\n"
                                       f"{self.log_tail()}")
                time.sleep(0.5)
            user = self._run("radosgw-admin", "-c", conf, "-n", "client.rgw.a", "user", "create",
                             "--uid=spotfleet", "--display-name=spotfleet tests",
                             f"--access-key={self.access_key}", f"--secret-key={self.secret_key}",
                             timeout=120)
            assert json.loads(user)["keys"][0]["access_key"] == self.access_key
            self.endpoint_url = url
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop gateway, OSD, monitor in that order: SIGTERM, then SIGKILL after 5 s each."""
        for _name, proc in reversed(self._procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()

    def kill_gateway(self) -> None:
        """SIGKILL the radosgw daemon only (monitor and OSD keep the data): the S3 server
        process dies mid-request, its port refuses connections until ``restart_gateway``."""
        for name, proc in self._procs:
            if name == "client.rgw.a" and proc.poll() is None:
                proc.kill()
                proc.wait()
        self._procs = [(n, p) for n, p in self._procs if n != "client.rgw.a"]

    def restart_gateway(self, timeout_seconds: float = 120.0) -> None:
        """Start radosgw again on the same port and cluster (same buckets and objects)."""
        self._spawn("client.rgw.a", "radosgw", "-f", "-c", str(self.conf), "-n", "client.rgw.a")
        end = time.monotonic() + timeout_seconds
        while True:
            self._check_alive()
            try:
                with urllib.request.urlopen(self.endpoint_url + "/", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > end:
                raise TimeoutError(f"radosgw did not come back on {self.endpoint_url}\n{self.log_tail()}")
            time.sleep(0.3)

    def client(self, **config_kwargs):
        """A boto3 S3 client for this gateway (path-style)."""
        import boto3
        from botocore.config import Config

        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, **config_kwargs))

    def __enter__(self) -> RadosGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_gateway(prefix: str = "spotfleet-radosgw-") -> Iterator[RadosGateway]:
    """A started gateway in a fresh temporary folder, stopped and removed afterwards.

    Skips the calling test (pytest) with the reason when the Ceph binaries are missing.
    """
    import pytest

    missing = missing_binaries()
    if missing:
        pytest.skip(f"real S3 server unavailable: {', '.join(missing)} not installed; "
                    "run `sudo bash scripts/install_test_services.sh` (Debian: ceph-mon ceph-osd "
                    "radosgw ceph-common)")
    workdir = tempfile.mkdtemp(prefix=prefix)
    gateway = RadosGateway(workdir)
    try:
        gateway.start()
        yield gateway
    finally:
        gateway.stop()
        shutil.rmtree(workdir, ignore_errors=True)
