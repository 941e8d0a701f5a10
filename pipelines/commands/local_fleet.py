"""``spotfleet local-fleet run``: the example training job on the local emulated fleet.

Nodes are real local processes in emulated zones; a preemption injector replays the
market (synthetic by default, or real traces) with time compression, sends each
cloud's notice, kills after the grace window; the provider relaunches in another zone
and the job resumes exactly. The log shows notice -> emergency save -> relaunch ->
exact resume; the summary lists sessions, preemptions and cost.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from pipelines.commands.argtypes import DefaultsHelpFormatter, counted, number, plain_text

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "train_example.py"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "local-fleet", help="run the example training job on the local emulated spot fleet",
        description=plain_text(__doc__.split("\n\n")[0]))
    sub = p.add_subparsers(dest="local_fleet_command", metavar="SUBCOMMAND")
    r = sub.add_parser(
        "run", help="train through injected preemptions to completion",
        description=("Runs examples/train_example.py on local processes in emulated zones "
                     "(forked from a warm fork server; SPOTFLEET_FORK_SERVER=off: fresh ones) "
                     "with injected preemptions (notice, grace, kill) and relaunches in other "
                     "zones until the job completes; prints the path notice -> emergency "
                     "save -> relaunch -> exact resume and a summary."),
        formatter_class=DefaultsHelpFormatter)
    r.add_argument("--zones", type=int, default=3, help="number of emulated zones")
    r.add_argument("--steps", type=int, default=300, help="training steps")
    r.add_argument("--seed", type=int, default=0, help="seed of the market and the training")
    r.add_argument("--time-scale", type=number("--time-scale"), default=2.0, metavar="SECONDS",
                   help="wall seconds per emulated (trace) hour")
    r.add_argument("--market", choices=["synthetic", "rotating", "traces"], default="synthetic",
                   help="synthetic: the calibrated synthetic market; rotating: zones fail one "
                        "after another (a drill); traces: real traces from --traces-dir")
    r.add_argument("--traces-dir", type=Path, help="directory of spot-trace JSON files "
                   "(with --market traces), e.g. ../shared/data/spot-traces/availability/"
                   "1-node/aws-02-15-2023")
    r.add_argument("--instance-types", default="", metavar="TYPES",
                   help="with --market traces: comma-separated instance types to keep (file "
                        "label, e.g. v100_1, or accelerator, e.g. v100); needed when the "
                        "folder has several types in one zone (one job, one type)")
    r.add_argument("--start-hour", type=number("--start-hour", allow_zero=True), default=72.0,
                   help="where in the trace the replay starts (hours); the hours before it are "
                        "the market's past the fleet policy starts from")
    r.add_argument("--cloud", choices=["aws", "gcp", "azure", "signal"], default=None,
                   help="whose notice protocol the nodes hear (default: the cloud the trace "
                        "files name with --market traces, e.g. gcp for gcp-h100-2025; else aws)")
    r.add_argument("--grace-scale", type=number("--grace-scale"), default=0.05,
                   help="grace window = the cloud's (AWS 120 s, GCP/Azure 30 s) x this")
    r.add_argument("--min-uptime", type=number("--min-uptime", allow_zero=True), default=2.0,
                   metavar="SECONDS", help="useful seconds a node gets before a notice")
    r.add_argument("--step-sleep", type=number("--step-sleep", allow_zero=True), default=0.03,
                   metavar="SECONDS", help="extra seconds per training step (a slower GPU)")
    r.add_argument("--periodic-every", type=int, default=100, help="periodic checkpoint every N steps")
    r.add_argument("--model", choices=["mlp", "transformer"], default="mlp",
                   help="the example's model (--model of examples/train_example.py)")
    r.add_argument("--deadline", type=number("--deadline"), metavar="SECONDS",
                   help="wall-clock deadline; the fleet falls back to on-demand to meet it")
    r.add_argument("--policy", choices=_policy_names(), default=_default_policy(),
                   help="the fleet policy (fleet/policies/registry.py, the ones fleet-sim "
                        "evaluates) that places and moves the node group")
    r.add_argument("--max-relaunches", type=int, default=20,
                   help="relaunches after preemptions before the attempt counts as lost")
    r.add_argument("--workdir", type=Path, help="checkpoints, events and logs (default: temp dir)")
    r.add_argument("--no-verify", dest="verify", action="store_false",
                   help="skip the uninterrupted reference run that checks the exact resume")
    r.add_argument("--quiet-progress", action="store_true", help="hide training progress lines")
    r.set_defaults(handler=run_handler)
    p.set_defaults(handler=lambda args: (p.print_help(), 2)[1])


def _schedule(args):
    from fleet.emulation.injector import CapacitySchedule, one_instance_type_per_zone
    from fleet.market.traces import check_trace_set, load_trace_dir

    if args.zones < 1:
        raise ValueError(f"--zones {args.zones}: need at least 1 zone")
    types = getattr(args, "instance_types", "") or ""  # callers that build args predate it
    if types and args.market != "traces":
        raise ValueError(f"--instance-types filters trace files: it needs --market traces "
                         f"(got --market {args.market})")
    if getattr(args, "traces_dir", None) is not None and args.market != "traces":
        raise ValueError(f"--traces-dir {args.traces_dir} is read only with --market traces; "
                         f"--market {args.market} would run without it: add --market traces "
                         "to replay the folder, or drop --traces-dir")
    if args.market == "rotating":
        names = ["us-east-1a", "us-east-1b", "us-west-2a", "us-west-2b", "us-east-2a",
                 "us-east-2b", "us-east-1c", "us-west-2c", "us-east-2c"]
        if args.zones > len(names):
            raise ValueError(f"--zones {args.zones}: the rotating drill has at most {len(names)}")
        drill = CapacitySchedule.rotating(names[: args.zones])
        return CapacitySchedule(drill.traces.values(), offset_seconds=args.start_hour * 3600.0)
    if args.market == "traces":
        if args.traces_dir is None:
            raise ValueError("--market traces needs --traces-dir DIR (a folder of "
                             "<zone>_<accelerator>_<count>.json spot traces)")
        itypes = [x.strip() for x in types.split(",") if x.strip()] or None
        traces = load_trace_dir(args.traces_dir, instance_types=itypes)
        one_instance_type_per_zone(traces, fix="choose one with --instance-types TYPE")
        traces = traces[: args.zones]
        # the folder passed load_trace_dir's checks; the zones replayed must pass them too
        check_trace_set(traces, f"{args.traces_dir} (its first {len(traces)} zone(s), "
                                f"--zones {args.zones})")
        return CapacitySchedule(traces, offset_seconds=args.start_hour * 3600.0)
    from fleet.market.synthetic import default_market_config, generate_market

    hours = max(48.0, args.start_hour + 48.0)
    traces = generate_market(default_market_config(n_zones=args.zones), hours, args.seed)
    return CapacitySchedule(traces, offset_seconds=args.start_hour * 3600.0)


def _policy_names() -> list[str]:
    from fleet.policies.registry import policy_names

    return policy_names()


def _default_policy() -> str:
    from fleet.policies.registry import DEFAULT_POLICY

    return DEFAULT_POLICY


def _priors(args, schedule, ts, cfg):
    """The run contract's priors in emulated (market) seconds for the example job.

    R (``restart_seconds``): what this fleet charges every launch before the process
    runs, the emulated VM allocation + preparation (``cfg.allocation_seconds +
    preparation_seconds`` wall s, in market s); the provider refines it with each node's
    measured launch -> ready (the process' start included) before every decision, so the
    policy plans relaunches with what the fleet bills (not the cloud default of 0.1 h)."""
    from fleet.contract import RunPriors
    from fleet.emulation.injector import CLOUD_GRACE_SECONDS

    grace = (cfg.grace_seconds if cfg.grace_seconds is not None
             else CLOUD_GRACE_SECONDS[cfg.cloud] * cfg.grace_scale)
    return RunPriors(
        restart_seconds=ts.to_trace(cfg.allocation_seconds + cfg.preparation_seconds),
        work_seconds=args.steps * (args.step_sleep + 0.005) * ts.factor,
        notice_seconds=grace * ts.factor,
        on_demand_price_per_hour=_on_demand_price(schedule, cfg),
        spot_price_per_hour={z: cfg.prices.spot_price(cfg.instance_type, z) for z in schedule.zones})


def _on_demand_price(schedule, cfg) -> float:
    """On-demand $/h of the fleet's instance type: the cheapest region of the schedule
    (where the simulator runs on-demand before anything is saved; was us-east-1's price
    whatever the zones)."""
    return min(cfg.prices.on_demand_price(cfg.instance_type, schedule.region_of(z))
               for z in schedule.zones)


def _cloud(args, schedule) -> str:
    """--cloud, else the cloud the trace files name (one for every zone), else aws."""
    if args.cloud:
        return args.cloud
    clouds = {t.cloud for t in schedule.traces.values()}
    return clouds.pop() if args.market == "traces" and len(clouds) == 1 else "aws"


def _reference_sha(cmd_tail: list[str], workdir: Path) -> str | None:
    """Run the example uninterrupted (no step sleep) and return its state_sha256."""
    import os
    import subprocess

    from checkpointing.events import read_events

    ref_dir = workdir / "reference"
    ev = ref_dir / "events.jsonl"
    ref_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SPOTFLEET_EVENTS_FILE=str(ev), SPOTFLEET_NODE_ID="reference",
               SPOTFLEET_NOTICE_SOURCES="signal:SIGTERM")
    env.pop("SPOTFLEET_STATS_FILE", None)
    cmd = [sys.executable, str(EXAMPLE), *cmd_tail, "--step-sleep", "0",
           "--checkpoint-uri", str(ref_dir / "ckpt")]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    exits = [e for e in read_events(ev) if e.kind == "exit"]
    return exits[-1].data.get("state_sha256") if exits else None


def _set_aside_earlier_run(workdir: Path) -> None:
    """A --workdir used before keeps its checkpoints (the re-run resumes from them) but not
    the earlier run's node events and logs, nor its reference run: read again, the events
    came back as this run's (negative market seconds, a 0 $ session; before 2026-11-27)."""
    import shutil

    fleet = workdir / "fleet"
    if fleet.is_dir() and any(fleet.iterdir()):
        stamp = time.strftime("%Y%m%dT%H%M%S")
        prev = workdir / f"fleet-earlier-{stamp}"
        k = 1
        while prev.exists():
            k += 1
            prev = workdir / f"fleet-earlier-{stamp}-{k}"
        fleet.rename(prev)
        print(f"workdir {workdir} holds an earlier run: its node events and logs moved to "
              f"{prev}; training resumes from the latest checkpoint in "
              f"{workdir / 'checkpoints'}", file=sys.stderr)
    shutil.rmtree(workdir / "reference", ignore_errors=True)  # the uninterrupted reference


#: what the fork server preloads for the example besides torch (forkserver.PRELOAD): the
#: checkpointing modules examples/train_example.py imports
EXAMPLE_PRELOAD = ("checkpointing.session", "checkpointing.torch_state")
#: wall seconds to wait for the fork server to listen before the market clock starts
FORK_SERVER_WAIT_SECONDS = 180.0


def _fork_server():
    """Start a warm fork server for the nodes (as ``spotfleet main`` does): each node start
    forks an interpreter that already imported torch instead of a fresh ``python``.

    Returns ``(handle or None, socket path or None)``; the caller waits for it
    (:func:`_wait_fork_server`) and stops the handle. ``SPOTFLEET_FORK_SERVER=off``: none;
    a ``$SPOTFLEET_FORK_SERVER`` socket that exists (a caller's server): that one."""
    import os

    from fleet.providers.local.forkserver import ENV_FORK_SERVER, start_server

    env = os.environ.get(ENV_FORK_SERVER, "")
    if env.lower() in ("off", "0", "no", "false"):
        return None, None
    if env and os.path.exists(env):
        return None, env
    sock = Path(tempfile.gettempdir()) / f"spotfleet-local-fleet-fork-{os.getpid()}.sock"
    return start_server(sock, preload=EXAMPLE_PRELOAD), str(sock)


def _wait_fork_server(handle, path: str | None) -> bool:
    """Wait (up to FORK_SERVER_WAIT_SECONDS) until the server listens; say what happened."""
    import os

    if path is None:
        print("fork server: off (SPOTFLEET_FORK_SERVER=off): every node start is a fresh python "
              "process", flush=True)
        return False
    t = time.time()
    end = t + FORK_SERVER_WAIT_SECONDS
    while not os.path.exists(path) and time.time() < end and (handle is None or handle.proc.poll() is None):
        time.sleep(0.05)
    if os.path.exists(path):
        print(f"fork server: ready in {time.time() - t:.1f} s (node starts fork it: no fresh python "
              "+ torch import)", flush=True)
        return True
    print(f"fork server: not ready after {time.time() - t:.1f} s; nodes start as fresh python "
          "processes", flush=True)
    return False


def _restart_line(result, ts) -> str:
    """Node starts (launch -> ready) as billed, and the R of the policy's last decision."""
    starts = [s.ready_at - s.launched_at for s in result.sessions if s.ready_at is not None]
    told = result.info.get("policy_restart_seconds")
    shown = ", ".join(f"{ts.to_wall(r):.2f}" for r in starts) or "none"
    hours = ", ".join(f"{r / 3600.0:.2f}" for r in starts)
    last = f"; the policy's R at its last decision: {told / 3600.0:.2f} h" if told is not None else ""
    return f"node starts (launch -> ready): {shown} s wall" + (f" = {hours} market h" if starts else "") + last


def run_handler(args) -> int:
    if args.steps < 1:
        raise ValueError(f"--steps {args.steps}: must be >= 1")
    if not EXAMPLE.exists():
        raise FileNotFoundError(f"{EXAMPLE} is missing; run from a spotfleet checkout")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="spotfleet-local-fleet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    schedule = _schedule(args)
    server, sock = _fork_server()  # imports torch while the rest is set up
    try:
        return _run(args, workdir, schedule, server, sock)
    finally:
        if server is not None:
            server.stop()


def _run(args, workdir: Path, schedule, server, sock: str | None) -> int:
    from fleet.emulation.injector import TimeScale
    from fleet.providers.base import AttemptFailed, StageSpec
    from fleet.providers.local import LocalFleetConfig, LocalFleetProvider
    from fleet.providers.local.forkserver import ENV_FORK_SERVER
    from fleet.providers.local.narrate import Narrator, sessions_table

    _set_aside_earlier_run(workdir)
    ts = TimeScale(args.time_scale)
    # the nodes' env names the listening server, else none (an empty value: Popen)
    extra_env = {ENV_FORK_SERVER: sock if _wait_fork_server(server, sock) else ""}
    t0 = time.time()  # the market clock starts here: events and sessions come back in market time
    cloud = _cloud(args, schedule)
    cfg = LocalFleetConfig(schedule=schedule, time_scale=ts, cloud=cloud, market_clock_start_unix=t0,
                           grace_scale=args.grace_scale, min_uptime_seconds=args.min_uptime,
                           workdir=workdir / "fleet", seed=args.seed,
                           extra_env=extra_env).with_file_prices()
    accs = {t.accelerator.upper() for t in schedule.traces.values()}
    accelerator = accs.pop() if args.market == "traces" and len(accs) == 1 else "V100"
    tail = ["--steps", str(args.steps), "--seed", str(args.seed), "--model", args.model,
            "--size", "tiny", "--periodic-every", str(args.periodic_every)]
    spec = StageSpec(name="example", command=[sys.executable, str(EXAMPLE), *tail,
                                              "--step-sleep", str(args.step_sleep)],
                     checkpoint_uri=str(workdir / "checkpoints"),
                     zones=tuple(schedule.zones),
                     deadline_seconds=args.deadline * ts.factor if args.deadline else None,
                     max_relaunches=args.max_relaunches, policy=args.policy,
                     accelerator=accelerator, priors=_priors(args, schedule, ts, cfg))
    print(f"local fleet: {counted(len(schedule.zones), 'zone')} {schedule.zones}, market {args.market}, "
          f"1 emulated hour = {ts.wall_seconds_per_trace_hour:g} s wall, notices as {cloud} "
          f"(grace {cfg.grace_scale:g} x the cloud's window), workdir {workdir}", flush=True)
    print(f"billing {cfg.instance_type}: {cfg.prices.describe()}"
          + ("; spot per tick of the files at each launch" if any(
              t.spot_prices is not None for t in schedule.traces.values()) else ""), flush=True)
    r0 = spec.priors.restart_seconds
    print(f"restart the policy plans with: {r0:.0f} market s = {r0 / 3600.0:.2f} h (the emulated "
          f"allocation + preparation) at first, then refined by each node's measured launch -> "
          f"ready", flush=True)
    narrator = Narrator(t0, progress=not args.quiet_progress, factor=ts.factor)

    def show(event) -> None:
        line = narrator.line(event)
        if line:
            print(line, flush=True)

    provider = LocalFleetProvider(cfg)
    try:
        result = provider.run_stage(spec, attempt=1, on_event=show)
    except AttemptFailed as exc:
        print(f"\nthe attempt failed: {exc}\nRe-run the same command: it resumes from the latest "
              f"checkpoint in {workdir / 'checkpoints'}.", file=sys.stderr)
        return 1
    info = result.info
    od = _on_demand_price(schedule, cfg)
    emulated_h = (time.time() - t0) * ts.factor / 3600.0
    print("\nnode sessions (market seconds, cost of the emulated hours):")
    print(sessions_table(result.sessions))
    print(f"\n{len(result.sessions)} sessions, {info['preemptions']} preemptions, zones "
          f"{' -> '.join(info['zones'])}")
    print(f"cost: {info['cost_usd']:.2f} $ over {emulated_h:.1f} emulated hours "
          f"(on-demand for the same time: {od * emulated_h:.2f} $)")
    print(_restart_line(result, ts))
    code = 0
    if args.verify:
        ref = _reference_sha(tail, workdir)
        same = ref is not None and ref == info.get("state_sha256")
        print(f"exact resume: final state_sha256 {str(info.get('state_sha256'))[:16]}... "
              f"{'==' if same else '!='} uninterrupted run {str(ref)[:16]}...")
        code = 0 if same else 1
    return code
