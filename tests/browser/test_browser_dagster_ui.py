"""Browser test: `dagster dev` + headless Chromium launch a materialization from the asset graph.

Starts `dagster dev -m pipelines.definitions` on a free port with a one-stage pipeline on
the local fleet, drives Debian's /usr/bin/chromium through playwright-core (installed by
scripts/install_test_services.sh into $SPOTFLEET_BROWSER_TOOLS). First the checks job runs
with nothing recorded: the checks tabs must show "Skipped" (no result), never "Passed".
Then it clicks "Materialize all", waits for the run to succeed and saves screenshots
under out/browser/.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("SPOTFLEET_BROWSER_TOOLS", Path.home() / ".cache" / "spotfleet-browser"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("SPOTFLEET_BROWSER_ARTIFACTS", REPO / "out" / "browser"))

PIPELINE = """
pipelines:
  - name: ui
    provider: local
    deadline_hours: 48
    checkpoint_uri: checkpoints/ui
    schedule_cron: "0 * * * *"
    market: {seed: 4, wall_seconds_per_market_hour: 30, cloud: signal, grace_seconds: 3,
             inject_preemptions_at_steps: {train: [30]}, lose_attempt_at_step: {train: 70}}
    stages:
      - name: train
        script: examples/train_example.py
        args: [--steps, "100", --seed, "1", --size, tiny, --step-sleep, "0.03", --periodic-every, "20"]
        work_hours: 2
        resources: {zones: [us-east-1f, us-east-1c, us-west-2b]}
"""


def _missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} missing (apt-get install chromium; see scripts/install_test_services.sh)"
    if shutil.which("node") is None:
        return "node missing (apt-get install nodejs npm)"
    if not (TOOLS / "node_modules" / "playwright-core" / "package.json").exists():
        return f"playwright-core missing in {TOOLS} (bash scripts/install_test_services.sh)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT (dagster dev shuts its children down), then SIGKILL the whole process group."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def test_materialize_from_the_asset_graph_in_chromium(tmp_path):
    why = _missing()
    if why:
        pytest.skip(why)
    from pipelines.home import prepare_dagster_home

    var = tmp_path / "var"
    home = prepare_dagster_home(var)
    cfg = tmp_path / "ui.yaml"
    cfg.write_text(PIPELINE)
    port = _free_port()
    env = dict(os.environ, DAGSTER_HOME=str(home), SPOTFLEET_PIPELINES=str(cfg), SPOTFLEET_VAR_DIR=str(var))
    env.pop("SPOTFLEET_DB_URL", None)
    log = (tmp_path / "dagster-dev.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-m", "pipelines.definitions", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while True:
            try:
                with urllib.request.urlopen(f"{base}/server_info", timeout=5) as r:
                    assert b"dagster_webserver_version" in r.read()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "dagster-dev.log").read_text()[-3000:]
                assert time.time() < deadline, "dagster dev did not serve within 240 s"
                time.sleep(2)
        SHOTS.mkdir(parents=True, exist_ok=True)
        _assert_checks_with_nothing_to_evaluate_show_skipped(base)
        out = subprocess.run(
            ["node", str(Path(__file__).with_name("dagster_ui.mjs")), base, "ui", str(SHOTS), "480", "train_train"],
            env=dict(os.environ, PLAYWRIGHT_CORE_DIR=str(TOOLS), CHROMIUM=CHROMIUM),
            capture_output=True, text=True, timeout=660)
        assert out.returncode == 0, out.stderr[-3000:]
        result = json.loads(out.stdout.strip().splitlines()[-1])
        assert result["status"] == "SUCCESS", (result, (tmp_path / "dagster-dev.log").read_text()[-3000:])
        for shot in result["screenshots"]:
            assert Path(shot).stat().st_size > 10_000, shot
        # the run really trained: node sessions and a preemption landed in the statistics DB
        from infra.db.models import NodeSessionRecord, PreemptionEvent
        from infra.db.recorder import read_table
        from infra.db.session import make_engine

        eng = make_engine(f"sqlite:///{var / 'spotfleet.db'}")
        sessions = read_table(eng, NodeSessionRecord, "ui")
        assert (sessions["end_reason"] == "completed").sum() == 1
        assert len(read_table(eng, PreemptionEvent, "ui")) >= 1
        assert (var / "reports" / "ui" / "cost_report.png").exists()
        _assert_ui_shows_the_whole_stage_the_plot_and_no_red_check(base, result, eng)
    finally:
        _stop(proc)
        log.close()


def _graphql(base: str, query: str, variables: dict | None = None) -> dict:
    body = {"query": query, "variables": variables or {}}
    req = urllib.request.Request(f"{base}/graphql", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = json.loads(r.read())
    assert "errors" not in body, body
    return body["data"]


MATERIALIZATION = """{ assetOrError(assetKey: {path: ["ui", "%s"]}) { ... on Asset {
  assetMaterializations(limit: 1) { runId metadataEntries { label
    ... on IntMetadataEntry { intValue } ... on FloatMetadataEntry { floatValue }
    ... on TextMetadataEntry { text } ... on MarkdownMetadataEntry { mdStr } } } } } }"""
CHECKS = """{ assetNodes(assetKeys: [{path: ["ui", "cost_report"]}, {path: ["ui", "train_train"]},
  {path: ["ui", "preemption_stats"]}]) { assetKey { path } assetChecksOrError { ... on AssetChecks {
  checks { name executionForLatestMaterialization { status runId evaluation { severity } } } } } } }"""


LAUNCH = """mutation($p: ExecutionParams!) { launchRun(executionParams: $p) { __typename
  ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } ... on InvalidSubsetError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
RUN = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""


def _run_job(base: str, job: str) -> str:
    """Launch a job of the code location through GraphQL (as the Launchpad does), wait for its end."""
    params = {"selector": {"repositoryLocationName": "pipelines.definitions", "repositoryName": "__repository__",
                           "jobName": job}, "mode": "default", "runConfigData": {}}
    launched = _graphql(base, LAUNCH, {"p": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    deadline = time.time() + 180
    while time.time() < deadline:
        status = _graphql(base, RUN, {"id": run_id})["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            return status
        time.sleep(2)
    raise AssertionError(f"{job} run {run_id} did not finish within 180 s")


def _check_statuses(base: str) -> dict:
    """{(asset, check): (status of its latest execution shown in the UI | NOT_RUN, severity)}"""
    statuses = {}
    for node in _graphql(base, CHECKS)["assetNodes"]:
        for c in node["assetChecksOrError"]["checks"]:
            ex = c["executionForLatestMaterialization"]
            sev = ((ex or {}).get("evaluation") or {}).get("severity")
            statuses[(node["assetKey"]["path"][-1], c["name"])] = (ex["status"] if ex else "NOT_RUN", sev)
    return statuses


def _shot(base: str, name: str, url_path: str, wait_text: str) -> dict:
    out = subprocess.run(
        ["node", str(Path(__file__).with_name("dagster_ui.mjs")), base, "--shot", str(SHOTS), name, url_path,
         wait_text], env=dict(os.environ, PLAYWRIGHT_CORE_DIR=str(TOOLS), CHROMIUM=CHROMIUM),
        capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _assert_checks_with_nothing_to_evaluate_show_skipped(base: str) -> None:
    """Before anything trained, the checks job has nothing to evaluate: each DB-backed check emits
    no result and the UI shows it as "Skipped" (grey) -- not "Passed" (green), not red."""
    assert _run_job(base, "ui__checks") == "SUCCESS"
    statuses = _check_statuses(base)
    assert statuses.pop(("preemption_stats", "enough_samples"))[0] == "SUCCEEDED"  # the market exists
    assert {v[0] for v in statuses.values()} == {"SKIPPED"}, statuses
    page = _shot(base, "0-cost-report-checks-skipped", "/assets/ui/cost_report?view=checks", "within_budget")
    text = page["text"]
    assert "cost_reconciles_with_node_sessions" in text and "within_budget" in text, text[:2000]
    assert "Skipped" in text and "Passed" not in text and "Execution failed" not in text, text[:2000]
    stage = _shot(base, "0-stage-checks-skipped", "/assets/ui/train_train?view=checks", "latest_checkpoint_recent")
    assert "Skipped" in stage["text"] and "Passed" not in stage["text"], stage["text"][:2000]


def _meta(base: str, asset: str) -> dict:
    mats = _graphql(base, MATERIALIZATION % asset)["assetOrError"]["assetMaterializations"]
    assert mats, f"ui/{asset} was not materialized"
    out = {}
    for e in mats[0]["metadataEntries"]:
        out[e["label"]] = next((e[k] for k in ("intValue", "floatValue", "text", "mdStr") if k in e), None)
    return out


def _assert_ui_shows_the_whole_stage_the_plot_and_no_red_check(base: str, result: dict, eng) -> None:
    """After the run with a lost attempt: the stage asset reports all attempts, the plot renders,
    and no check is red ("failed" / "execution failed") when it did not run or passed."""
    from assets import cost_tables as ct

    data = ct.load(eng, "ui")
    hist = ct.stage_history(data, "train")
    assert hist.attempts == 2 and hist.lost_attempts == 1  # the injected lost attempt was retried
    stage = _meta(base, "train_train")
    assert stage["attempts"] == 2 and stage["lost_attempts"] == 1
    assert stage["node_sessions"] == hist.sessions >= 3  # first launch, relaunch, the retry's node
    assert stage["preemptions"] == hist.preemptions >= 2  # the notice + the lost node group
    assert abs(stage["cost_usd"] - hist.cost_usd) < 1e-3
    assert stage["node_sessions"] > stage["this_attempt_sessions"]
    seen = result["seen"]
    text = seen["stageText"]
    assert "attempt_history" in text and "lost_attempts" in text
    # the plot: an <img> with the inline PNG, rendered with a real size in the cost report's page
    assert seen["plotVisible"], seen
    assert seen["plotBox"]["width"] > 200 and seen["plotBox"]["height"] > 100
    # the rendered HTML: real tables, readable headers, no raw markdown
    assert seen["htmlTables"] >= 6 and "Spend ($)" in seen["htmlText"], seen.get("htmlText", "")[:500]
    assert "###" not in seen["htmlText"] and "**" not in seen["htmlText"]
    report = _meta(base, "cost_report")
    assert report["plot"].startswith("![") and "data:image/png;base64," in report["plot"]
    assert report["spend_usd"] == round(report["spend_usd"], 4)  # rounded metadata floats
    assert abs(report["spend_usd"] - float(data.sessions["cost_usd"].sum())) < 1e-3
    statuses = _check_statuses(base)
    # red in the UI: an ERROR-severity failure, or "execution failed" (planned, never ran)
    red = {k: v for k, v in statuses.items() if v[0] == "EXECUTION_FAILED" or v == ("FAILED", "ERROR")}
    assert not red, statuses
    assert statuses[("cost_report", "cost_reconciles_with_node_sessions")][0] == "SUCCEEDED", statuses
    # every check ran on the trained run: none is left "Skipped" (all inputs exist now)
    assert "SKIPPED" not in {v[0] for v in statuses.values()}, statuses
    assert "Passed" in seen["checksText"] and "Execution failed" not in seen["checksText"]
