"""Orchestration-side fleet library: spot market, statistics, planning, policies,
providers (local emulated fleet, SkyPilot) and GFS cluster scheduling.

May import ``checkpointing`` (cost model, events); never imports ``assets``/``pipelines``.
"""
