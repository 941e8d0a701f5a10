"""A test double of the SkyPilot API server at its HTTP boundary (loopback only).

The real SkyPilot client SDK runs unchanged against it (health and version
handshake, client-side validation, request bodies, ``sky.get`` decoding of the
request payload with SkyPilot's own encoders/decoders). It implements the few
endpoints the provider uses, the way ``sky/server/server.py`` answers them:

    GET  /api/health          status + version headers
    POST /validate            loads the DAG YAML and runs ``dag.validate`` (real code)
    POST /jobs/launch         records the task YAML, creates a managed job (PENDING)
    POST /jobs/queue/v2       snapshot of the job table (ManagedJobRecord)
    POST /jobs/cancel         CANCELLED
    GET  /api/get             the request as a ``RequestPayload``

Managed-job progress (the controller's side) is driven by the test:
``run(job_id, zone)``, ``preempt(job_id)``, ``succeed(job_id)``, ``fail(job_id, why)``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import sky
from sky.jobs.state import ManagedJobStatus
from sky.schemas.api import responses
from sky.server import constants as server_constants
from sky.server.requests import payloads
from sky.server.requests import requests as requests_lib
from sky.utils import dag_utils


def _server_entrypoint() -> None:
    """Stands in for the server-side function a request runs (pickled by reference)."""


class FakeSkyApiServer:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.jobs: dict[int, dict[str, Any]] = {}
        self.requests: dict[str, requests_lib.Request] = {}
        self.calls: list[tuple[str, str]] = []  # (method, path)
        self.launched_yaml: dict[int, str] = {}
        self.validated: list[str] = []
        self._next_job = 1
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> str:
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header(server_constants.API_VERSION_HEADER, str(server_constants.API_VERSION))
                self.send_header(server_constants.VERSION_HEADER, sky.__version__)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                double.calls.append(("GET", self.path.split("?")[0]))
                if self.path.startswith("/api/health"):
                    return self._reply(200, {"status": "healthy",
                                             "api_version": str(server_constants.API_VERSION),
                                             "version": sky.__version__, "commit": "test-double",
                                             "basic_auth_enabled": False})
                if self.path.startswith("/api/get"):
                    rid = self.path.split("request_id=", 1)[1].split("&")[0]
                    req = double.requests.get(rid)
                    if req is None:
                        return self._reply(404, {"detail": f"Request {rid!r} not found"})
                    return self._reply(200, req.encode().model_dump())
                return self._reply(404, {"detail": "not found"})

            def do_POST(self) -> None:
                path = self.path.split("?")[0]
                double.calls.append(("POST", path))
                n = int(self.headers.get("Content-Length") or 0)
                raw = json.loads(self.rfile.read(n) or b"{}")
                try:
                    status, body, rid = double.handle(path, raw)
                except Exception as exc:  # a bug in the double: show it in the test
                    return self._reply(500, {"detail": f"double error: {exc!r}"})
                self._reply(status, body, {"X-Skypilot-Request-ID": rid} if rid else None)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ------------------------------------------------------------------ endpoints
    def _finish(self, name: str, body: payloads.RequestBody, value: Any) -> str:
        rid = uuid.uuid4().hex
        req = requests_lib.Request(
            request_id=rid, name=server_constants.REQUEST_NAME_PREFIX + name, entrypoint=_server_entrypoint, request_body=body,
            status=requests_lib.RequestStatus.SUCCEEDED, created_at=time.time(), user_id="test",
            finished_at=time.time())
        req.set_return_value(value)
        with self._lock:
            self.requests[rid] = req
        return rid

    def handle(self, path: str, raw: dict) -> tuple[int, Any, str | None]:
        if path == "/validate":
            body = payloads.ValidateBody(**raw)
            self.validated.append(body.dag)
            try:
                dag = dag_utils.load_dag_from_yaml_str(body.dag)
                dag.validate(skip_file_mounts=True, skip_workdir=True)
            except Exception as exc:
                from sky import exceptions

                return 400, {"detail": exceptions.serialize_exception(exc)}, None
            return 200, None, None
        if path == "/jobs/launch":
            body = payloads.JobsLaunchBody(**raw)
            with self._lock:
                job_id = self._next_job
                self._next_job += 1
                self.launched_yaml[job_id] = body.task
                self.jobs[job_id] = {"job_id": job_id, "task_id": 0, "job_name": body.name,
                                     "task_name": body.name, "status": ManagedJobStatus.PENDING,
                                     "submitted_at": time.time(), "recovery_count": 0}
            return 200, None, self._finish("jobs.launch", body, ([job_id], None))
        if path == "/jobs/queue/v2":
            body = payloads.JobsQueueV2Body(**raw)
            with self._lock:
                jobs = [responses.ManagedJobRecord(**dict(j)) for jid, j in sorted(self.jobs.items())
                        if not body.job_ids or jid in body.job_ids]
            return 200, None, self._finish("jobs.queue_v2", body, (jobs, len(jobs), {}, len(jobs)))
        if path == "/jobs/cancel":
            body = payloads.JobsCancelBody(**raw)
            with self._lock:
                for jid in body.job_ids or []:
                    job = self.jobs.get(jid)
                    if job and not job["status"].is_terminal():
                        job.update(status=ManagedJobStatus.CANCELLED, end_at=time.time())
            return 200, None, self._finish("jobs.cancel", body, None)
        return 404, {"detail": f"{path} is not implemented by the test double"}, None

    # ------------------------------------------------------------------ controller side
    def run(self, job_id: int, zone: str, cloud: str = "AWS", at: float | None = None) -> None:
        """RUNNING in ``zone`` at ``at`` (default now), stamped as SkyPilot's controller does
        (sky/jobs/state.py): a first start sets ``start_at`` and ``last_recovered_at`` to the
        same second (set_started_async); a recovery only ``last_recovered_at`` (set_recovered_async)."""
        now = time.time() if at is None else at
        with self._lock:
            job = self.jobs[job_id]
            if job["status"] == ManagedJobStatus.RECOVERING:
                job["recovery_count"] += 1
                job["last_recovered_at"] = now
            elif job.get("start_at") is None:
                job.update(start_at=now, last_recovered_at=now)
            job.update(status=ManagedJobStatus.RUNNING, zone=zone, region=zone[:-1], cloud=cloud)

    def preempt(self, job_id: int) -> None:
        with self._lock:
            self.jobs[job_id]["status"] = ManagedJobStatus.RECOVERING

    def succeed(self, job_id: int) -> None:
        with self._lock:
            self.jobs[job_id].update(status=ManagedJobStatus.SUCCEEDED, end_at=time.time())

    def fail(self, job_id: int, why: str) -> None:
        with self._lock:
            self.jobs[job_id].update(status=ManagedJobStatus.FAILED, end_at=time.time(),
                                     failure_reason=why)
