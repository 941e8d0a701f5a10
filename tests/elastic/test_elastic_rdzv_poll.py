"""The rendezvous poll interval (checkpointing.elastic_run.install_rendezvous_poll): only
torch's 1 s SYNC poll is shortened, in torch's own op loop; an unknown torch falls back to
torch's poll with a warning. No timing assertions: what is called with what."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import torch
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr
from torch.distributed.elastic.rendezvous import utils as rdzv_utils

from checkpointing import elastic_run
from checkpointing.elastic_run import (
    ElasticRunConfig,
    _poll_delay,
    install_rendezvous_poll,
    parse_args,
    shorten_state_cache,
)


@pytest.fixture
def torch_delay(monkeypatch):
    """Restore dynamic_rendezvous._delay after the test (the patch rebinds it)."""
    monkeypatch.setattr(dr, "_delay", dr._delay)
    return dr._delay


def test_the_wrapper_shortens_only_the_one_second_sync_poll():
    calls = []
    delay = _poll_delay(lambda seconds: calls.append(seconds), 0.2)
    delay(seconds=1)  # torch's SYNC poll
    delay(seconds=(0, 0.3))  # the random skew before an agent's first re-join
    delay(seconds=5)
    delay(1.0)
    assert calls == [0.2, (0, 0.3), 5, 0.2]


def test_the_join_skew_narrows_only_torchs_pre_join_skew():
    calls = []
    delay = _poll_delay(lambda seconds: calls.append(seconds), 0.2, join_skew=0.05)
    delay(seconds=(0, 0.3))  # torch's skew before an agent's first re-join
    delay(seconds=(0, 2))  # any other range: unchanged
    delay(seconds=1)
    assert calls == [(0, 0.05), (0, 2), 0.2]
    calls.clear()
    keep = _poll_delay(lambda seconds: calls.append(seconds), 0.2)  # no skew: torch's
    keep(seconds=(0, 0.3))
    assert calls == [(0, 0.3)]


def test_the_join_skew_reaches_torchs_next_rendezvous(torch_delay, monkeypatch, caplog):
    calls = []
    monkeypatch.setattr(dr, "_delay", lambda seconds: calls.append(seconds))
    # the skew alone installs the wrapper with torch's 1 s poll (the cache stays torch's)
    assert not install_rendezvous_poll(None, join_skew=0.05)
    assert dr._delay.spotfleet_join_skew == 0.05 and dr._delay.spotfleet_poll_interval == 1
    dr._delay(seconds=1)
    dr._delay(seconds=(0, 0.3))
    assert calls == [1, (0, 0.05)]

    class Stop(Exception):
        pass

    handler = dr.DynamicRendezvousHandler.__new__(dr.DynamicRendezvousHandler)
    handler._this_node = "n"
    handler._settings = dr.RendezvousSettings("r", 1, 2, dr.RendezvousTimeout(),
                                              timedelta(seconds=5), 3)
    handler._state_holder = type("H", (), {"state": dr._RendezvousState()})()
    handler._record = lambda **_: None
    handler._stop_heartbeats = lambda: None

    def stop(_):
        raise Stop

    handler._get_deadline = stop
    calls.clear()
    with pytest.raises(Stop):  # torch's next_rendezvous up to its join: the skew was slept
        handler.next_rendezvous()
    assert calls == [(0, 0.05)]
    with pytest.raises(ValueError, match="0-0.3"):
        install_rendezvous_poll(0.2, join_skew=0.5)

    monkeypatch.setattr(elastic_run, "_join_skew_is_torchs", lambda _dr: False)
    with caplog.at_level(logging.WARNING, logger="checkpointing.elastic_run"):
        assert install_rendezvous_poll(0.2, join_skew=0.05)
    assert "join skew" in caplog.text and dr._delay.spotfleet_join_skew is None


def test_installed_in_torchs_own_op_loop(torch_delay, monkeypatch):
    calls = []
    monkeypatch.setattr(dr, "_delay", lambda seconds: calls.append(seconds))
    assert install_rendezvous_poll(0.25)
    assert dr._delay.spotfleet_poll_interval == 0.25
    # installing again wraps torch's function, not the wrapper
    assert install_rendezvous_poll(0.2) and dr._delay.__wrapped__ is not None
    assert not hasattr(dr._delay.__wrapped__, "spotfleet_poll_interval")

    class Holder:  # a state holder with nothing to write (sync() -> None)
        state = dr._RendezvousState()

        def sync(self):
            return None

        def mark_dirty(self):
            pass

    settings = dr.RendezvousSettings("run", 1, 2, dr.RendezvousTimeout(),
                                     keep_alive_interval=timedelta(seconds=5),
                                     keep_alive_max_attempt=3)
    executor = dr._DistributedRendezvousOpExecutor(dr._NodeDesc("h", 1, 0), Holder(), settings)
    actions = iter([dr._Action.SYNC, dr._Action.SYNC, dr._Action.FINISH])
    executor.run(lambda ctx, deadline: next(actions), deadline=float("inf"))
    assert calls == [0.2, 0.2]


def test_a_real_handler_reads_the_store_at_the_poll_interval(torch_delay):
    store = elastic_run.host_rendezvous_store("127.0.0.1:0")
    from torch.distributed.elastic.rendezvous import RendezvousParameters, registry

    params = RendezvousParameters(backend="c10d", endpoint=f"127.0.0.1:{store.port}", run_id="r",
                                  min_nodes=1, max_nodes=2, is_host="false")
    handler = registry.get_rendezvous_handler(params)
    assert handler._state_holder._cache_duration == 1  # torch's
    assert shorten_state_cache(handler, 0.2) and handler._state_holder._cache_duration == 0.2
    cfg = ElasticRunConfig(1, 2, f"127.0.0.1:{store.port}", "r2", last_call_timeout=0.5)
    frac = elastic_run._fractional_handler(params, cfg)  # sub-second last call
    assert frac.settings.timeout.last_call.total_seconds() == 0.5
    assert frac.settings.timeout.join.total_seconds() == cfg.join_timeout


@pytest.mark.parametrize("break_it", ["version", "no_delay", "layout"])
def test_an_unknown_torch_keeps_torchs_poll_with_a_warning(torch_delay, monkeypatch, caplog,
                                                            break_it):
    if break_it == "version":
        monkeypatch.setattr(torch, "__version__", "9.1.0+cpu")
    elif break_it == "no_delay":
        monkeypatch.delattr(dr, "_delay")
    else:
        monkeypatch.setattr(dr._DistributedRendezvousOpExecutor, "run",
                            lambda self, *a, **k: None)
    with caplog.at_level(logging.WARNING, logger="checkpointing.elastic_run"):
        assert not install_rendezvous_poll(0.2)
    assert "keeping torch's 1 s poll" in caplog.text
    assert getattr(dr, "_delay", torch_delay) is torch_delay


def test_torchs_default_on_request_and_bad_values(torch_delay, caplog):
    with caplog.at_level(logging.WARNING, logger="checkpointing.elastic_run"):
        assert not install_rendezvous_poll(None) and not install_rendezvous_poll(1.0)
    assert caplog.text == "" and dr._delay is torch_delay is rdzv_utils._delay
    with pytest.raises(ValueError, match="seconds > 0"):
        install_rendezvous_poll(0)


def test_cli_and_the_local_fleet_pass_the_interval(tmp_path, capsys):
    base = ["--nnodes", "1:4", "--rdzv-endpoint", "h:1", "--rdzv-id", "x"]
    cfg, _, _ = parse_args([*base, "t.py"])
    assert cfg.rdzv_poll_interval == elastic_run.DEFAULT_RDZV_POLL_INTERVAL
    cfg, _, _ = parse_args([*base, "--rdzv-poll-interval", "1", "--last-call-timeout", "0.5",
                            "t.py"])
    assert (cfg.rdzv_poll_interval, cfg.last_call_timeout) == (1.0, 0.5)
    with pytest.raises(SystemExit):
        parse_args([*base, "--rdzv-poll-interval", "0", "t.py"])
    assert "seconds > 0" in capsys.readouterr().err

    from fleet.providers.local.elastic_drill import drill_run
    from fleet.providers.local.multinode import ElasticConfig

    run = drill_run(tmp_path / "w", tmp_path / "c", elastic=ElasticConfig(rdzv_poll_interval=0.3))
    cmd = run._node_command("127.0.0.1:9")
    assert cmd[cmd.index("--rdzv-poll-interval") + 1] == "0.3"
    assert cmd[cmd.index("--rdzv-join-skew") + 1] == f"{elastic_run.DEFAULT_RDZV_JOIN_SKEW:g}"
    run = drill_run(tmp_path / "w2", tmp_path / "c2", elastic=ElasticConfig(rdzv_join_skew=0.1))
    cmd = run._node_command("127.0.0.1:9")
    assert cmd[cmd.index("--rdzv-join-skew") + 1] == "0.1"
    cfg, _, _ = parse_args([*base, *cmd[cmd.index("--rdzv-join-skew"):cmd.index("--")], "t.py"])
    assert cfg.rdzv_join_skew == 0.1
    cfg, _, _ = parse_args([*base, "t.py"])
    assert cfg.rdzv_join_skew == elastic_run.DEFAULT_RDZV_JOIN_SKEW
    run = drill_run(tmp_path / "w3", tmp_path / "c3", elastic=ElasticConfig(rdzv_join_skew=None))
    assert "--rdzv-join-skew" not in run._node_command("127.0.0.1:9")  # torch's own
    with pytest.raises(SystemExit):
        parse_args([*base, "--rdzv-join-skew", "1", "t.py"])


def test_a_rank_waits_for_the_group_store_to_listen_before_connecting():
    """checkpointing.elastic.wait_until_listening: True once rank 0's store listens (it may
    come up after the probe started), False when nothing listens or no address is set."""
    import socket
    import threading

    from checkpointing.elastic import wait_until_listening

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    assert not wait_until_listening("127.0.0.1", port, timeout=0.05)
    assert not wait_until_listening(None, None, timeout=1.0)
    started = threading.Event()
    box = {}

    def serve() -> None:
        started.wait()
        box["store"] = elastic_run.host_rendezvous_store(f"127.0.0.1:{port}")

    th = threading.Thread(target=serve)
    th.start()
    started.set()
    assert wait_until_listening("127.0.0.1", str(port), timeout=30.0)
    th.join()
    box["store"].set("k", "v")  # the store took the probe's connect-and-close in its stride
    assert box["store"].get("k") == b"v"


# -- install_cheap_event_names: torch's get_method_name without inspect.stack() ---------------

@pytest.fixture
def torch_method_name(monkeypatch):
    """Restore dynamic_rendezvous.get_method_name after the test (the patch rebinds it)."""
    monkeypatch.delenv(elastic_run.ENV_KEEP_TORCH_EVENT_NAMES, raising=False)
    original = dr.get_method_name
    monkeypatch.setattr(dr, "get_method_name", original)
    return original


def test_the_frame_lookup_names_the_same_function_as_torchs(torch_method_name):
    def record(fn, depth):  # stands for torch's _record: get_method_name() names its caller
        return fn(depth) if depth is not None else fn()

    def join_op(fn, depth=None):
        return record(fn, depth)

    def agent(fn, depth=None):
        return join_op(fn, depth)

    for depth in (None, 1, 2, 3, 4):  # (0 would be the function itself: its own name)
        assert agent(elastic_run._frame_method_name, depth) == agent(torch_method_name, depth)
    assert agent(elastic_run._frame_method_name) == "join_op"
    assert elastic_run._frame_method_name(10_000) == "no_method_name" == torch_method_name(10_000)


def test_installed_where_torchs_rendezvous_records_its_events(torch_method_name, monkeypatch):
    assert elastic_run.install_cheap_event_names()
    assert dr.get_method_name is elastic_run._frame_method_name
    assert elastic_run.install_cheap_event_names()  # idempotent
    # torch's own _record names the event after the method that recorded it
    names = []
    monkeypatch.setattr(dr, "construct_and_record_rdzv_event",
                        lambda **kw: names.append(kw["name"]))
    from torch.distributed.elastic.rendezvous import RendezvousParameters, registry

    store = elastic_run.host_rendezvous_store("127.0.0.1:0")
    handler = registry.get_rendezvous_handler(RendezvousParameters(
        backend="c10d", endpoint=f"127.0.0.1:{store.port}", run_id="ev", min_nodes=1,
        max_nodes=2, is_host="false"))
    handler._record("x")
    assert names == ["DynamicRendezvousHandler."
                     "test_installed_where_torchs_rendezvous_records_its_events"]


def test_an_unknown_torch_or_the_opt_out_keeps_torchs_method_name(torch_method_name, monkeypatch,
                                                                   caplog):
    monkeypatch.setenv(elastic_run.ENV_KEEP_TORCH_EVENT_NAMES, "1")
    assert not elastic_run.install_cheap_event_names()
    assert dr.get_method_name is torch_method_name
    monkeypatch.delenv(elastic_run.ENV_KEEP_TORCH_EVENT_NAMES)
    monkeypatch.setattr(torch, "__version__", "9.9.0")
    with caplog.at_level(logging.WARNING, logger="checkpointing.elastic_run"):
        assert not elastic_run.install_cheap_event_names()
    assert dr.get_method_name is torch_method_name and "not a tested release" in caplog.text
    monkeypatch.setattr(torch, "__version__", "2.13.0")
    monkeypatch.setattr(dr, "get_method_name", lambda depth=2: "x")  # a different torch
    with caplog.at_level(logging.WARNING, logger="checkpointing.elastic_run"):
        assert not elastic_run.install_cheap_event_names()
    assert "no longer the inspect.stack() one" in caplog.text
