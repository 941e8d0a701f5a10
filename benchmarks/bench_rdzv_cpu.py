"""CPU time of torch's dynamic rendezvous per join + exit, with torch's ``get_method_name``
(``inspect.stack()``) and with ``checkpointing.elastic_run.install_cheap_event_names``.

One handler (min = max = 1 node) joins a round and leaves it, repeatedly, on a local
TCPStore, from ``--depth`` extra frames down (an elastic agent calls the rendezvous from
~20 frames deep: ``run_node`` -> ``agent.run`` -> ``_invoke_run`` -> ... ). Every action
of the round (join, keep-alive, sync result, exit) records a debug event whose name
``get_method_name`` computes; the CPU that costs is what a CPU-starved agent pays before
each compare-and-set retry (docs/elastic.md, "Known limits: thrashing under load").

    python benchmarks/bench_rdzv_cpu.py [--rounds 40] [--depth 20] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--depth", type=int, default=20, help="extra stack frames above the calls")
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args(argv)
    os.environ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend

    from checkpointing.elastic_run import _frame_method_name, host_rendezvous_store

    torchs = dr.get_method_name
    store = host_rendezvous_store("127.0.0.1:0")
    params = RendezvousParameters(backend="c10d", endpoint=f"127.0.0.1:{store.port}",
                                  run_id="bench", min_nodes=1, max_nodes=1, is_host="false")
    backend, rdzv_store = create_backend(params)
    handler = dr.DynamicRendezvousHandler.from_backend(
        "bench", rdzv_store, backend, 1, 1, "127.0.0.1",
        dr.RendezvousTimeout(last_call=timedelta(seconds=0.001)))
    handler._state_holder._cache_duration = 0  # every action reads the store

    def round_trip() -> None:
        handler.next_rendezvous()
        handler._stop_heartbeats()
        handler._op_executor.run(dr._RendezvousExitOp(), time.monotonic() + 5)

    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        else:
            round_trip()

    cpus: dict[str, list[float]] = {}
    for _ in range(a.repeat):
        for name, fn in (("torch's get_method_name", torchs), ("frame lookup", _frame_method_name)):
            dr.get_method_name = fn
            round_trip()
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(a.rounds):
                deep(a.depth)
            cpu = (time.process_time() - cpu) / a.rounds * 1e3
            wall = (time.perf_counter() - wall) / a.rounds * 1e3
            print(f"{name:<24} CPU {cpu:6.2f} ms, wall {wall:6.2f} ms per join + exit "
                  f"({a.rounds} rounds, {a.depth} extra frames)")
            cpus.setdefault(name, []).append(cpu)
    ratio = min(cpus["frame lookup"]) / max(min(cpus["torch's get_method_name"]), 1e-9)
    print(f"frame lookup / torch's, CPU per join + exit (best of {a.repeat}): {ratio:.3f} "
          "(the peer measured in the same run)")
    dr.get_method_name = torchs
    return 0


if __name__ == "__main__":
    sys.exit(main())
