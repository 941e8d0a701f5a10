"""Issue 9 item 8: credentials in URLs never reach a log, an event, an error or Dagster.

* ``checkpointing.redact`` (the one helper) hides ``scheme://user:pass@`` and secret
  ``NAME=value`` pairs;
* ``S3Store`` takes ``s3://KEY:SECRET@bucket/prefix`` (the credentials are used, never
  shown) and drops ``user:pass@`` from an endpoint URL, against the real radosgw;
* the MAIN JOB (``spotfleet main``, a real subprocess) runs a pipeline whose checkpoint
  URI is ``s3://KEY:SECRET@bucket/...`` and whose nodes get
  ``AWS_ENDPOINT_URL=http://user:password@127.0.0.1:<port>``, with a preemption injected;
  afterwards every file it wrote (var dir: events, node logs, Dagster run storage and
  compute logs, statistics DB, reports) and its own output are searched for the secret
  and the endpoint password: zero hits.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fault_s3 import new_bucket

from checkpointing.redact import REDACTED, install, redact, redact_env, strip_userinfo
from checkpointing.stores.base import StoreError
from checkpointing.stores.s3 import S3Store

REPO = Path(__file__).resolve().parents[2]
ENDPOINT_USER, ENDPOINT_PASSWORD = "gwuser", "Endp0intPassw0rd-7731"


def test_redact_hides_url_credentials_and_secret_values() -> None:
    secret = "abc/DEF+ghi="
    assert redact(f"s3://AKIAXX:{secret}@bucket/run") == f"s3://{REDACTED}@bucket/run"
    assert secret not in redact(f"uri s3://AKIAXX:{secret}@bucket/run failed")
    assert redact("AWS_ENDPOINT_URL=http://u:p4ss@127.0.0.1:7480") == \
        f"AWS_ENDPOINT_URL=http://{REDACTED}@127.0.0.1:7480"
    assert redact("AWS_SECRET_ACCESS_KEY=s3cr3t x") == f"AWS_SECRET_ACCESS_KEY={REDACTED} x"
    assert redact('{"AWS_SESSION_TOKEN": "tok"}') == '{"AWS_SESSION_TOKEN": "' + REDACTED + '"}'
    # ordinary text is left alone
    for text in ("tensors-00000.bin step=5 max_tokens: 12", "s3://bucket/run", "mail a@b.com"):
        assert redact(text) == text
    assert redact_env({"AWS_SECRET_ACCESS_KEY": "x", "AWS_ENDPOINT_URL": "http://u:p@h", "PATH": "/b"}) == \
        {"AWS_SECRET_ACCESS_KEY": REDACTED, "AWS_ENDPOINT_URL": f"http://{REDACTED}@h", "PATH": "/b"}
    assert strip_userinfo(f"s3://K:{secret}@b/p") == ("s3://b/p", "K", secret)


def test_installed_redaction_covers_log_records_and_exception_text(caplog: pytest.LogCaptureFixture) -> None:
    install()
    log = logging.getLogger("h9b.redaction.test")
    with caplog.at_level(logging.INFO):
        log.info("opening %s", "s3://KEY:TopSecret99@bucket/x")
        try:
            raise RuntimeError("cannot reach http://u:TopSecret99@host")
        except RuntimeError:
            log.exception("failed")
    text = caplog.text + "".join(r.exc_text or "" for r in caplog.records)
    assert "TopSecret99" not in text and REDACTED in text


@pytest.mark.s3
def test_s3_store_uses_uri_credentials_and_never_shows_them(s3_gateway, monkeypatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    host = s3_gateway.endpoint_url.split("://", 1)[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{ENDPOINT_USER}:{ENDPOINT_PASSWORD}@{host}")
    monkeypatch.setenv("AWS_REGION", s3_gateway.region)
    bucket = new_bucket(s3_gateway)
    secret = s3_gateway.secret_key
    store = S3Store.from_uri(f"s3://{s3_gateway.access_key}:{secret}@{bucket}/run")
    store.put_bytes("a/b", b"payload")  # the URI's credentials sign the requests
    assert store.get_bytes("a/b") == b"payload"
    assert store.location == f"s3://{bucket}/run"
    assert ENDPOINT_PASSWORD not in store.endpoint_label
    with pytest.raises(StoreError) as err:  # an error names the place, never the secret
        S3Store.from_uri(f"s3://{s3_gateway.access_key}:{secret}@no-such-bucket-h9b/run").get_bytes("x")
    assert secret not in str(err.value) and ENDPOINT_PASSWORD not in str(err.value)
    assert "no-such-bucket-h9b" in str(err.value)


def test_training_process_against_unreachable_s3_leaks_no_credential(tmp_path: Path) -> None:
    """The example with s3://KEY:SECRET@bucket and an endpoint URL with user:password,
    pointing at a closed port: it fails (restore cannot reach the store); its log, its
    traceback and its events file name the place, never the credentials."""
    from example_procs import ExampleLauncher

    secret, password = "Uri5ecretValue+/=9", "EndpointPw-42x"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_"))}
    env.update({"SPOTFLEET_CHECKPOINT_URI": f"s3://AKIAH9BTEST:{secret}@h9b-bucket/run",
                "AWS_ENDPOINT_URL": f"http://h9b:{password}@127.0.0.1:9", "AWS_REGION": "us-east-1",
                "SPOTFLEET_S3_MAX_ATTEMPTS": "1", "SPOTFLEET_SPILL_DIR": "off",
                "SPOTFLEET_EVENTS_FILE": str(tmp_path / "events.jsonl")})
    launcher = ExampleLauncher(["--steps", "20", "--size", "tiny"], env, tmp_path / "events.jsonl",
                               tmp_path / "logs")
    proc = launcher.start("p")
    proc.join(timeout=300)
    log = launcher.log("p")
    events = (tmp_path / "events.jsonl").read_text()
    assert proc.exitcode == 1, log
    assert "unreachable" in log and "s3://h9b-bucket/run" in log  # the error is still useful
    assert "reason" in events and "error" in events  # the exit event recorded the error
    for text in (log, events):
        assert secret not in text and password not in text


PIPELINE = """
pipelines:
  - name: redact
    provider: local
    deadline_hours: 24.0
    checkpoint_uri: {uri}
    market:
      kind: synthetic
      seed: 4
      n_zones: 2
      hours: 48
      wall_seconds_per_market_hour: 30
      cloud: signal
      grace_seconds: 3.0
      inject_preemptions_at_steps:
        train: [30]
    stages:
      - name: train
        script: examples/train_example.py
        args: [--steps, "60", --seed, "1", --size, tiny, --step-sleep, "0.02", --periodic-every, "10"]
        work_hours: 1.0
        env:
          AWS_ENDPOINT_URL: {endpoint}
          AWS_REGION: {region}
        resources:
          zones: [us-east-1f, us-east-1c]
          spot: true
"""


@pytest.mark.slow
@pytest.mark.s3
def test_main_job_with_credentials_in_urls_writes_them_nowhere(s3_gateway, tmp_path: Path) -> None:
    bucket = new_bucket(s3_gateway)
    secret = s3_gateway.secret_key
    host = s3_gateway.endpoint_url.split("://", 1)[1]
    uri = f"s3://{s3_gateway.access_key}:{secret}@{bucket}/ckpt"
    endpoint = f"http://{ENDPOINT_USER}:{ENDPOINT_PASSWORD}@{host}"
    yaml_path = tmp_path / "pipelines.yaml"
    yaml_path.write_text(PIPELINE.format(uri=uri, endpoint=endpoint, region=s3_gateway.region))
    var = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPOTFLEET_", "AWS_", "DAGSTER_"))}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run([str(Path(sys.executable).parent / "spotfleet"), "main", "--pipelines", str(yaml_path),
                           "--var-dir", str(var)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    output = proc.stdout + proc.stderr
    hits = [f"output: {line[:300]}" for line in output.splitlines()
            if secret in line or ENDPOINT_PASSWORD in line]
    assert proc.returncode in (0, 1), output[-3000:]  # 1: an asset check may flag the tiny run

    # the job really used the S3 store with the URI's credentials and resumed after the preemption
    s3 = S3Store(bucket, "ckpt", client=s3_gateway.client())
    assert [k for k, _ in s3.list("") if k.endswith("MANIFEST.json")], output[-3000:]
    assert "succeeded" in output, output[-3000:]

    written = 0
    for path in var.rglob("*"):
        if not path.is_file():
            continue
        written += 1
        data = path.read_bytes()
        for needle in (secret, ENDPOINT_PASSWORD):
            at = data.find(needle.encode())
            if at >= 0:
                context = data[max(0, at - 150):at].decode(errors="replace")
                hits.append(f"{path.relative_to(var)}: ...{context!r}<{needle[:4]}...>")
    assert written > 10  # events, node logs, Dagster storage, DB, reports were searched
    assert not hits, "\n".join(hits)
