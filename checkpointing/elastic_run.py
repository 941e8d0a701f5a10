"""Per-node launcher of an elastic stage: PyTorch's elastic agent with c10d rendezvous.

What ``torchrun --nnodes=MIN:MAX --nproc-per-node=1 --rdzv-backend=c10d
--rdzv-endpoint=HOST:PORT --max-restarts=N script.py ...`` does, with four changes
that make preemptions cheap (everything else is ``torch.distributed.elastic``:
``LocalElasticAgent``, ``DynamicRendezvousHandler`` on the c10d backend):

1. Workers are **forked** from the agent (``start_method="fork"`` with a function
   entrypoint that runs the script with ``runpy``), so a membership change costs a fork,
   not a fresh interpreter importing torch again.
2. The agent stops its workers for a membership change with ``SIGUSR1``
   (``checkpointing.elastic.REFORM_SIGNAL``) instead of SIGTERM: SIGTERM is how a cloud
   announces a preemption, and the worker must tell the two apart (hand off and re-form
   vs. leave).
3. A node that leaves (its agent got SIGTERM: the notice, or its worker left after a
   metadata-endpoint notice) removes itself from the rendezvous at once instead of
   waiting for its keep-alive to expire, so the survivors re-form without delay. It does
   NOT close the rendezvous (that would end the job for everyone).
4. An agent waiting in a rendezvous round looks again every ``--rdzv-poll-interval``
   (0.2 s) instead of torch's hard-coded 1 s (``install_rendezvous_poll``), and the last
   call may be a fraction of a second (``--last-call-timeout``, 0.5 s): a re-formation
   cost about two 1 s polls plus a 1 s last call.

Exit codes: 0 the stage completed; 75 this node left after a preemption notice; 74 the
stage completed but the final checkpoint was not committed (the worker's exit code; never
restarted); 1 the worker group failed (more than ``--max-restarts`` failures).

    python -m checkpointing.elastic_run --nnodes 1:4 --rdzv-endpoint 10.0.0.1:29400 \\
        --rdzv-id stage-a1 -- examples/train_elastic.py --steps 300

The rendezvous store (``--rdzv-endpoint``) must be hosted by something that outlives
every spot node: the local fleet hosts it in the provider process, on SkyPilot the head
node hosts it (put the head on on-demand capacity: ``docs/elastic.md``). ``--host-store``
makes this process host it.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import runpy
import signal
import sys
import time
from dataclasses import dataclass, field

from checkpointing.outcome import EXIT_FINAL_SAVE_FAILED
from checkpointing.runtime_env import EXIT_COMPLETED, EXIT_PREEMPTED

log = logging.getLogger("checkpointing.elastic_run")

DEFAULT_PORT = 29400

#: once the first node joined a round, wait this long for more (docs/elastic.md)
DEFAULT_LAST_CALL_TIMEOUT = 0.5
#: seconds between an agent's rendezvous polls while it waits for a round (torch: 1 s)
DEFAULT_RDZV_POLL_INTERVAL = 0.2
#: the torch releases (major.minor) whose dynamic rendezvous ``install_rendezvous_poll``
#: was read against; on any other the patch is not installed (torch's 1 s poll stays)
TESTED_TORCH = ("2.13",)
#: the one delay torch's ``_DistributedRendezvousOpExecutor.run`` sleeps on ``_Action.SYNC``
_TORCH_SYNC_POLL = 1
#: torch's random skew before an agent's first join of a handler's round 0
#: (``DynamicRendezvousHandler.next_rendezvous``: ``_delay(seconds=(0, 0.3))``)
_TORCH_JOIN_SKEW = (0, 0.3)
#: upper bound of that skew here, s (None keeps torch's 0.3 s): 0.05 s, see
#: install_rendezvous_poll and docs/elastic.md for the trade-off and the figures
DEFAULT_RDZV_JOIN_SKEW: float | None = 0.05


@dataclass
class ElasticRunConfig:
    """One node's agent settings. Durations in seconds (the rendezvous takes whole seconds)."""

    min_nodes: int
    max_nodes: int
    rdzv_endpoint: str
    run_id: str
    max_restarts: int = 1000  # each re-form after a shrink counts as one (grow does not)
    local_addr: str | None = None
    host_store: bool = False
    # wait for more nodes once min_nodes have joined (docs/elastic.md); a fraction of a
    # second builds the handler through from_backend (rdzv_configs take whole seconds)
    last_call_timeout: float = DEFAULT_LAST_CALL_TIMEOUT
    join_timeout: int = 600
    keep_alive_interval: int = 5  # heartbeats are CAS writes: frequent ones starve joiners
    keep_alive_max_attempt: int = 3
    monitor_interval: float = 0.05
    shutdown_timeout: int = 30  # a leaving node's worker gets this long to exit
    reform_timeout: int = 10  # a re-forming worker gets this long to hand off and exit
    read_timeout: int = 20  # rendezvous store reads (a peer agent died mid-round)
    max_rejoins: int = 5  # rendezvous failures this node survives by joining again
    exit_barrier_timeout: int = 120
    start_method: str = "fork"
    # how often an agent waiting in a rendezvous round re-reads its state (torch: 1 s,
    # hard-coded); None or >= 1: torch's own. See install_rendezvous_poll / docs/elastic.md
    rdzv_poll_interval: float | None = DEFAULT_RDZV_POLL_INTERVAL
    # torch's random 0-0.3 s skew before an agent's first re-join, scaled to 0-this s
    # (None: torch's own); trade-off in install_rendezvous_poll / docs/elastic.md
    rdzv_join_skew: float | None = DEFAULT_RDZV_JOIN_SKEW
    extra_rdzv: dict[str, str] = field(default_factory=dict)


def _run_script(script: str, *argv: str) -> None:
    """Worker entrypoint: run ``script`` as ``__main__`` (its SystemExit is the exit code)."""
    from checkpointing.elastic import install_reform_handler

    install_reform_handler()
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code == 0:
            return  # the agent collects the worker's return value
        # leave (75) / re-form (76): everything that matters is on disk or in /dev/shm
        # already; skip the interpreter teardown (seconds with torch loaded on a busy
        # machine), which would delay the survivors' re-formation by as much
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class _ExitWithoutTraceback(logging.Filter):
    """Log a worker's non-zero exit without the traceback of ``ProcessExitedException``.

    Formatting an exception through torch's log formatter imports ``torch._dynamo``
    (measured: 9-14 s on a loaded 2-core machine) in the agent at the moment the
    survivors should re-form; exit 75 / 76 are expected exits, not errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            exc = record.exc_info[1]
            record.msg = f"{record.msg} [{type(exc).__name__}: {str(exc).replace('%', '%%')}]"
            record.exc_info = None
            record.exc_text = None
        return True


def _agent_class():
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import SignalException

    from checkpointing.elastic import REFORM_SIGNAL

    class SpotfleetElasticAgent(LocalElasticAgent):
        """``LocalElasticAgent`` whose membership-change stop is ``SIGUSR1``, not SIGTERM,
        and that leaves the rendezvous as soon as its node leaves."""

        reform_timeout = 10
        left_rendezvous = False

        def _stop_workers(self, worker_group, *args, **kwargs) -> None:  # noqa: ANN001
            self._shutdown(REFORM_SIGNAL, timeout=self.reform_timeout)

        def _monitor_workers(self, worker_group):  # noqa: ANN001, ANN202
            # a worker that exits 74 completed every step, but the store did not take the
            # final checkpoint: a restart cannot train anything and, with the store still
            # down, fails at its restore, again and again (up to max_restarts). Terminal.
            result = super()._monitor_workers(worker_group)
            if result.is_failed() and any(f.exitcode == EXIT_FINAL_SAVE_FAILED
                                          for f in result.failures.values()):
                self._remaining_restarts = 0
            return result

        def _shutdown(self, death_sig=signal.SIGTERM, timeout: int = 30) -> None:  # noqa: ANN001
            # torch's run() calls this from its ``except SignalException`` block: this node
            # got the notice. Leave the rendezvous FIRST, then wait for the worker (it still
            # finishes the agreed step and hands off): the survivors' next round can only
            # open once every participant of the old one has left, so the leaver must not
            # be the last one out (measured: 0.3 s after the worker's exit otherwise).
            if isinstance(sys.exc_info()[1], SignalException) and not self.left_rendezvous:
                # the node is leaving: a second notice (the worker tells its agent too, a
                # signal cloud signals the whole process group) must not interrupt the
                # exit operation (measured: an interrupted exit left this node in the
                # round until its keep-alive expired, 12 s) nor the worker's shutdown
                _ignore_termination_signals()
                self.left_rendezvous = True
                _leave_rendezvous(self._worker_group.spec.rdzv_handler)
            super()._shutdown(death_sig, timeout)

    return SpotfleetElasticAgent


def _ignore_termination_signals() -> None:
    """Ignore the signals torch elastic turns into ``SignalException`` (this node leaves)."""
    names = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT")
    for name in names.split(","):
        sig = getattr(signal, name.strip(), None)
        if sig is not None:
            signal.signal(sig, signal.SIG_IGN)


def _leave_rendezvous(handler) -> None:  # noqa: ANN001
    """Remove this node from the rendezvous now (best effort; otherwise its keep-alive
    expires after keep_alive_interval x keep_alive_max_attempt seconds). Uses the
    dynamic rendezvous handler's exit operation, which is not public API: if it is not
    there, the expiry path still works."""
    try:
        from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _RendezvousExitOp

        handler._stop_heartbeats()
        handler._op_executor.run(_RendezvousExitOp(), time.monotonic() + 5.0)
    except Exception as exc:  # noqa: BLE001 - best effort
        log.warning("could not leave the rendezvous explicitly (%s: %s); the other nodes "
                    "drop this node when its keep-alive expires", type(exc).__name__, exc)


def _poll_delay(original, interval: float, join_skew: float | None = None):  # noqa: ANN001, ANN202
    """torch's ``utils._delay`` with only its 1 s SYNC poll shortened to ``interval`` and,
    when ``join_skew`` is given, its random ``(0, 0.3)`` skew before an agent's first
    re-join (``next_rendezvous``) narrowed to ``(0, join_skew)``.

    Every other delay passes through unchanged (in torch 2.13 there is none)."""

    def _delay(seconds) -> None:  # noqa: ANN001 - float | tuple[float, float], as torch's
        if isinstance(seconds, tuple):
            if join_skew is not None and tuple(seconds) == _TORCH_JOIN_SKEW:
                seconds = (0, join_skew)
        elif seconds == _TORCH_SYNC_POLL:
            seconds = interval
        original(seconds=seconds)

    _delay.spotfleet_poll_interval = interval
    _delay.spotfleet_join_skew = join_skew
    _delay.__wrapped__ = original
    return _delay


def install_rendezvous_poll(interval: float | None, join_skew: float | None = None) -> bool:
    """Make an agent that waits in a rendezvous round look again every ``interval``
    seconds instead of torch's hard-coded 1 s. Returns whether it is installed.

    torch's dynamic rendezvous (``_DistributedRendezvousOpExecutor.run``) sleeps
    ``_delay(seconds=1)`` each time the state handler answers SYNC ("nothing to do yet:
    wait for the others"), and its state holder serves a cached state for 1 s
    (``cache_duration``); a re-formation after a shrink costs about two such polls
    (docs/elastic.md). This rebinds ``dynamic_rendezvous._delay`` (the module's own
    reference, in this agent process only) to a wrapper that shortens ONLY that 1 s
    poll; :func:`shorten_state_cache` lowers the handler's cache to match. Nothing of
    torch's protocol changes: the same state, the same compare-and-set writes, read
    more often. The price is store load: every agent in the SYNC loop reads the
    rendezvous key once per ``interval``, and every training agent's
    ``num_nodes_waiting`` check (each ``monitor_interval``) reads it at most once per
    ``interval`` instead of once per second.

    ``join_skew`` (seconds, optional) narrows, through the same wrapper, torch's random
    0-0.3 s delay before a handler's first join (``next_rendezvous`` while its local
    state is round 0: an agent's first launch, and each survivor of the stage's first
    shrink) to 0-``join_skew``. torch's skew spreads agents that join at the same moment
    so that fewer of their compare-and-set writes of the one rendezvous key collide (a
    loser re-reads and writes again); a narrower skew makes the first joiner earlier
    (the round's last call starts with it) at the price of possibly more CAS retries.

    Not installed (torch's default kept, with a warning) when ``interval`` is None or
    >= 1 and no ``join_skew`` is given (nothing to change, no warning), when torch's
    release is not one of ``TESTED_TORCH``, or when its module no longer has the
    ``_delay`` / SYNC layout this was read against; ``join_skew`` alone is dropped (with
    a warning) when ``next_rendezvous`` no longer sleeps ``_delay(seconds=(0, 0.3))``.
    Returns whether the poll (not the skew) was shortened."""
    poll = interval is not None and interval < _TORCH_SYNC_POLL
    if not poll and join_skew is None:
        return False
    if interval is not None and interval <= 0:
        raise ValueError(f"rendezvous poll interval {interval!r}: use seconds > 0 (torch's "
                         "default is 1)")
    if join_skew is not None and not 0 <= join_skew <= _TORCH_JOIN_SKEW[1]:
        raise ValueError(f"rendezvous join skew {join_skew!r}: use 0-{_TORCH_JOIN_SKEW[1]} s "
                         "(torch's is 0.3)")
    import torch
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    why = None
    if release not in TESTED_TORCH:
        why = f"torch {torch.__version__} is not a tested release ({', '.join(TESTED_TORCH)})"
    elif not callable(getattr(dr, "_delay", None)):
        why = "torch.distributed.elastic.rendezvous.dynamic_rendezvous has no _delay"
    elif not _sync_poll_is_torchs(dr):
        why = "dynamic_rendezvous no longer sleeps _delay(seconds=1) on SYNC"
    if why is not None:
        log.warning("rendezvous poll interval %s s / join skew %s s not installed (%s); "
                    "keeping torch's 1 s poll and 0-0.3 s skew", interval, join_skew, why)
        return False
    if join_skew is not None and not _join_skew_is_torchs(dr):
        log.warning("rendezvous join skew %.2f s not installed (next_rendezvous no longer "
                    "sleeps _delay(seconds=(0, 0.3))); keeping torch's", join_skew)
        join_skew = None
        if not poll:
            return False
    original = getattr(dr._delay, "__wrapped__", dr._delay)
    dr._delay = _poll_delay(original, interval if poll else _TORCH_SYNC_POLL, join_skew)
    log.info("rendezvous poll interval %s s (torch's SYNC poll: 1 s), join skew 0-%s s "
             "(torch's: 0-0.3 s)", interval if poll else 1, 0.3 if join_skew is None else join_skew)
    return poll


def _join_skew_is_torchs(dr) -> bool:  # noqa: ANN001
    """Whether ``next_rendezvous`` sleeps the skew read: ``_delay(seconds=(0, 0.3))``."""
    import inspect

    try:
        src = inspect.getsource(dr.DynamicRendezvousHandler.next_rendezvous)
    except (AttributeError, OSError, TypeError):
        return False
    return "_delay(seconds=(0, 0.3))" in src


def _sync_poll_is_torchs(dr) -> bool:  # noqa: ANN001
    """Whether the op executor's run loop is the one read: ``_delay(seconds=1)`` on SYNC."""
    import inspect

    try:
        src = inspect.getsource(dr._DistributedRendezvousOpExecutor.run)
    except (AttributeError, OSError, TypeError):
        return False
    return "_Action.SYNC" in src and f"_delay(seconds={_TORCH_SYNC_POLL})" in src


#: env var: "1" keeps torch's own ``get_method_name`` (``install_cheap_event_names``)
ENV_KEEP_TORCH_EVENT_NAMES = "SPOTFLEET_RDZV_KEEP_TORCH_EVENT_NAMES"
_NO_METHOD_NAME = "no_method_name"


def _frame_method_name(depth: int = 2) -> str:
    """What torch's ``dynamic_rendezvous.get_method_name(depth)`` returns -- the name of
    the function ``depth`` frames up from this one -- read from that one frame instead
    of ``inspect.stack()`` (which builds source context for EVERY frame, twice)."""
    try:
        return sys._getframe(depth).f_code.co_name
    except ValueError:
        return _NO_METHOD_NAME


def install_cheap_event_names() -> bool:
    """Make torch's dynamic rendezvous name its events without ``inspect.stack()``.

    Every rendezvous action (join, keep-alive, each compare-and-set retry, each sync
    result) calls ``_record``, which calls ``get_method_name()`` to name a debug event,
    and ``get_method_name`` walks the whole call stack with ``inspect.stack()`` twice,
    reading source context for every frame; by default the event then goes to a
    ``NullHandler`` and is dropped. Measured on this 2-core machine (one node joining and
    leaving rounds, an agent-deep stack): 7.5 ms of CPU per join + exit with torch's,
    0.5 ms with this (docs/elastic.md). On a loaded machine that CPU is what delays an
    agent's compare-and-set retries past the round's last call, so the round closes
    without it. This rebinds ``dynamic_rendezvous.get_method_name`` (the module's own
    global, in this agent process) to :func:`_frame_method_name`, which returns the same
    name; nothing else changes. Guarded like ``install_rendezvous_poll``: only on a
    tested torch release whose ``get_method_name`` is the ``inspect.stack()`` one;
    ``SPOTFLEET_RDZV_KEEP_TORCH_EVENT_NAMES=1`` keeps torch's. Returns whether installed."""
    if os.environ.get(ENV_KEEP_TORCH_EVENT_NAMES) == "1":
        return False
    import inspect

    import torch
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr

    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    current = getattr(dr, "get_method_name", None)
    if current is _frame_method_name:
        return True
    why = None
    if release not in TESTED_TORCH:
        why = f"torch {torch.__version__} is not a tested release ({', '.join(TESTED_TORCH)})"
    elif not callable(current):
        why = "dynamic_rendezvous has no get_method_name"
    else:
        try:
            src = inspect.getsource(current)
        except (OSError, TypeError):
            src = ""
        if "inspect.stack()[depth].function" not in src:
            why = "dynamic_rendezvous.get_method_name is no longer the inspect.stack() one"
    if why is not None:
        log.warning("rendezvous event names: keeping torch's get_method_name (%s)", why)
        return False
    dr.get_method_name = _frame_method_name
    return True


def shorten_state_cache(handler, interval: float) -> bool:  # noqa: ANN001
    """Serve the rendezvous state from the handler's cache for at most ``interval``
    seconds (torch: 1 s, ``cache_duration`` fixed by ``from_backend``); without this a
    shorter poll re-reads a cached state. Returns whether it was applied."""
    holder = getattr(handler, "_state_holder", None)
    if holder is None or not isinstance(getattr(holder, "_cache_duration", None), (int, float)):
        log.warning("rendezvous state cache not shortened (the handler has no "
                    "_state_holder._cache_duration); polls re-read it once per second")
        return False
    holder._cache_duration = min(holder._cache_duration, interval)
    return True


def _fractional_handler(params, cfg: ElasticRunConfig):  # noqa: ANN001, ANN202
    """The c10d dynamic rendezvous handler that ``rdzv_registry`` builds, with a last call
    of a fraction of a second: ``create_handler`` reads ``last_call_timeout`` as whole
    seconds, ``DynamicRendezvousHandler.from_backend`` (what it calls) takes a timedelta.
    ``close_timeout`` / ``heartbeat_timeout`` in ``extra_rdzv`` are honoured as well."""
    from datetime import timedelta

    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        DynamicRendezvousHandler,
        RendezvousTimeout,
    )

    def seconds(key: str) -> timedelta | None:
        v = cfg.extra_rdzv.get(key)
        return None if v is None else timedelta(seconds=float(v))

    backend, store = create_backend(params)
    return DynamicRendezvousHandler.from_backend(
        params.run_id, store, backend, params.min_nodes, params.max_nodes, params.local_addr,
        RendezvousTimeout(join=timedelta(seconds=cfg.join_timeout),
                          last_call=timedelta(seconds=cfg.last_call_timeout),
                          close=seconds("close_timeout"), heartbeat=seconds("heartbeat_timeout")),
        keep_alive_interval=cfg.keep_alive_interval,
        keep_alive_max_attempt=cfg.keep_alive_max_attempt)


def run_node(cfg: ElasticRunConfig, script: str, argv: list[str]) -> int:
    """Run this node's agent until the stage completes, the node leaves, or it fails."""
    # a fresh worker bootstrap store per rendezvous round: with the agent-shared store, a
    # node that was rank 0 and then left would leave the others pointing at a dead store
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    from torch.distributed import DistError
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.rendezvous import RendezvousError, RendezvousParameters
    from torch.distributed.elastic.rendezvous import registry as rdzv_registry

    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(
        _ExitWithoutTraceback())
    poll = install_rendezvous_poll(cfg.rdzv_poll_interval, cfg.rdzv_join_skew)
    install_cheap_event_names()
    store_server = None
    if cfg.host_store:
        store_server = host_rendezvous_store(cfg.rdzv_endpoint)
    params = RendezvousParameters(
        backend="c10d", endpoint=cfg.rdzv_endpoint, run_id=cfg.run_id,
        min_nodes=cfg.min_nodes, max_nodes=cfg.max_nodes, local_addr=cfg.local_addr,
        is_host="false", last_call_timeout=math.ceil(cfg.last_call_timeout),
        join_timeout=cfg.join_timeout,
        keep_alive_interval=cfg.keep_alive_interval,
        keep_alive_max_attempt=cfg.keep_alive_max_attempt, read_timeout=cfg.read_timeout,
        **cfg.extra_rdzv)
    rejoins = 0
    while True:
        handler = (rdzv_registry.get_rendezvous_handler(params)
                   if float(cfg.last_call_timeout).is_integer() else _fractional_handler(params, cfg))
        if poll:
            shorten_state_cache(handler, cfg.rdzv_poll_interval)
        spec = WorkerSpec(role="trainer", local_world_size=1, entrypoint=_run_script,
                          args=(script, *argv), rdzv_handler=handler,
                          max_restarts=cfg.max_restarts, monitor_interval=cfg.monitor_interval,
                          local_addr=cfg.local_addr)
        agent = _agent_class()(spec, logs_specs=DefaultLogsSpecs(), start_method=cfg.start_method,
                               exit_barrier_timeout=cfg.exit_barrier_timeout,
                               shutdown_timeout=cfg.shutdown_timeout)
        agent.reform_timeout = cfg.reform_timeout
        os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
        try:
            result = agent.run()
        except SignalException as exc:
            log.warning("node leaves the stage (signal %s)", exc.sigval)
            if not agent.left_rendezvous:
                _leave_rendezvous(handler)
            return EXIT_PREEMPTED
        except (RendezvousError, DistError) as exc:
            # e.g. the agent that was rank 0 of the round died before publishing the
            # worker store: this node is healthy, its state (if any) waits in /dev/shm
            rejoins += 1
            if rejoins > cfg.max_rejoins:
                raise
            log.warning("rendezvous failed (%s: %s); joining again (%d/%d)", type(exc).__name__,
                        exc, rejoins, cfg.max_rejoins)
            _leave_rendezvous(handler)
            continue
        break
    # the rendezvous is closed through the store: a node hosting it (--host-store) drops
    # the store only after that, or its own shutdown fails on the closed socket (a C++
    # "recvVector failed" trace and "failed to shutdown the rendezvous" at every exit)
    if result.is_failed() and {f.exitcode for f in result.failures.values()} == {EXIT_FINAL_SAVE_FAILED}:
        # the worker logged what is saved where and the fix; meet the other nodes at the
        # exit barrier (they completed: without us they wait exit_barrier_timeout) and
        # end with the worker's code, not a restart loop nor a plain failure
        log.error("the stage completed but its final checkpoint was not committed (exit %d; "
                  "the worker's error above names the store and the fix)", EXIT_FINAL_SAVE_FAILED)
        try:
            agent._exit_barrier()
        except Exception as exc:  # noqa: BLE001 - best effort: the others time out instead
            log.warning("exit barrier: %s: %s", type(exc).__name__, exc)
        handler.shutdown()
        del store_server
        return EXIT_FINAL_SAVE_FAILED
    if result.is_failed():
        for rank, failure in result.failures.items():
            log.error("worker rank %d failed: exit code %s (%s)", rank, failure.exitcode,
                      failure.message)
        handler.shutdown()
        del store_server
        return 1
    handler.shutdown()
    del store_server
    return EXIT_COMPLETED


def host_rendezvous_store(endpoint: str):  # noqa: ANN201
    """Host the c10d rendezvous TCPStore at ``host:port`` (port 0: any free port).

    Returns the store; keep a reference for as long as the stage runs. ``.port`` is the
    bound port."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    host, _, port = endpoint.rpartition(":")
    return TCPStore(host or "127.0.0.1", int(port or DEFAULT_PORT), is_master=True,
                    wait_for_workers=False, multi_tenant=True, timeout=timedelta(seconds=60))


def prewarm() -> float:
    """Import and exercise, once in the agent, what every worker needs, so that each
    forked worker starts warm; returns the seconds it took.

    Building the first optimizer of a process imports ``torch._dynamo`` (10 s on this
    2-core machine under load); without this every re-formed worker would pay it."""
    t0 = time.perf_counter()
    import torch
    import torch.distributed  # noqa: F401

    import checkpointing.elastic  # noqa: F401
    import checkpointing.session  # noqa: F401

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    model(torch.zeros(1, 2)).sum().backward()
    opt.step()
    return time.perf_counter() - t0


def wait_for_go(timeout_seconds: float = 600.0) -> None:
    """Launch alignment (``SPOTFLEET_ELASTIC_GO_FILE``): report this node warm, then wait
    until the launcher lets the batch join the rendezvous together (nodes booting at the
    same time form one group instead of growing it one node at a time)."""
    go = os.environ.get("SPOTFLEET_ELASTIC_GO_FILE")
    if not go:
        return
    node = os.environ.get("SPOTFLEET_NODE_ID", str(os.getpid()))
    with open(f"{go}.ready.{node}", "w", encoding="utf-8"):
        pass
    end = time.monotonic() + timeout_seconds
    while not os.path.exists(go) and time.monotonic() < end:
        time.sleep(0.05)


def parse_args(argv: list[str] | None = None) -> tuple[ElasticRunConfig, str, list[str]]:
    p = argparse.ArgumentParser(
        prog="python -m checkpointing.elastic_run",
        description="Run one node of an elastic stage (torch elastic agent, c10d rendezvous).")
    p.add_argument("--nnodes", required=True, help="MIN:MAX nodes (or N)")
    p.add_argument("--rdzv-endpoint", required=True, help="HOST:PORT of the rendezvous store")
    p.add_argument("--rdzv-id", required=True, help="job id shared by every node of the stage")
    p.add_argument("--max-restarts", type=int, default=1000)
    p.add_argument("--local-addr", default=None, help="address other nodes reach this node at")
    p.add_argument("--host-store", action="store_true", help="this process hosts the store")
    p.add_argument("--last-call-timeout", type=float, default=DEFAULT_LAST_CALL_TIMEOUT,
                   metavar="SECONDS")
    p.add_argument("--keep-alive-interval", type=int, default=5, metavar="SECONDS")
    p.add_argument("--keep-alive-max-attempt", type=int, default=3)
    p.add_argument("--join-timeout", type=int, default=600, metavar="SECONDS")
    p.add_argument("--rdzv-poll-interval", type=float, default=DEFAULT_RDZV_POLL_INTERVAL,
                   metavar="SECONDS", help="how often a waiting agent re-reads the rendezvous "
                   f"(default {DEFAULT_RDZV_POLL_INTERVAL}; 1 = torch's own poll)")
    p.add_argument("--rdzv-join-skew", type=float, default=DEFAULT_RDZV_JOIN_SKEW,
                   metavar="SECONDS", help="upper bound of torch's random skew before an "
                   "agent's first re-join (torch: 0.3; default "
                   f"{DEFAULT_RDZV_JOIN_SKEW})")
    p.add_argument("script", help="training script (run as __main__ in each worker)")
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    lo, _, hi = a.nnodes.partition(":")
    try:
        min_nodes, max_nodes = int(lo), int(hi or lo)
    except ValueError:
        p.error(f"--nnodes={a.nnodes!r}: use MIN:MAX, e.g. 1:4")
    if not 1 <= min_nodes <= max_nodes:
        p.error(f"--nnodes={a.nnodes!r}: need 1 <= MIN <= MAX")
    if not a.rdzv_poll_interval > 0:
        p.error(f"--rdzv-poll-interval={a.rdzv_poll_interval!r}: use seconds > 0, e.g. "
                f"{DEFAULT_RDZV_POLL_INTERVAL} (1 = torch's own poll)")
    if a.rdzv_join_skew is not None and not 0 <= a.rdzv_join_skew <= _TORCH_JOIN_SKEW[1]:
        p.error(f"--rdzv-join-skew={a.rdzv_join_skew!r}: use 0-{_TORCH_JOIN_SKEW[1]} seconds")
    if ":" not in a.rdzv_endpoint:
        p.error(f"--rdzv-endpoint={a.rdzv_endpoint!r}: use HOST:PORT, e.g. 10.0.0.1:{DEFAULT_PORT}")
    args = list(a.script_args)
    if args and args[0] == "--":
        args = args[1:]
    cfg = ElasticRunConfig(min_nodes=min_nodes, max_nodes=max_nodes, rdzv_endpoint=a.rdzv_endpoint,
                           run_id=a.rdzv_id, max_restarts=a.max_restarts, local_addr=a.local_addr,
                           host_store=a.host_store, last_call_timeout=a.last_call_timeout,
                           keep_alive_interval=a.keep_alive_interval,
                           keep_alive_max_attempt=a.keep_alive_max_attempt,
                           join_timeout=a.join_timeout,
                           rdzv_poll_interval=a.rdzv_poll_interval,
                           rdzv_join_skew=a.rdzv_join_skew)
    return cfg, a.script, args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("SPOTFLEET_ELASTIC_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg, script, args = parse_args(argv)
    if os.environ.get("SPOTFLEET_RDZV_DEBUG"):
        logging.getLogger("torch.distributed.elastic.rendezvous").setLevel(logging.DEBUG)
    prewarm()
    wait_for_go()

    return run_node(cfg, script, args)


if __name__ == "__main__":
    sys.exit(main())
