"""Fleet policies for deadline jobs: where a job runs each tick (idle, on-demand, spot in a
zone). ``base`` (interface: JobSpec, JobState, Observation, Action, Policy), ``safety``
(deadline safety net), ``baselines`` (on-demand only, single-zone greedy, SkyPilot-style
failover, Uniform Progress), ``spotfleet`` (spotfleet's policy), ``scripted`` (replay a
plan). Simulated by :mod:`fleet.simulation`; see docs/fleet-policies.md."""
