"""Training-side library: runs INSIDE the training process on a (spot) node.

It must never import Dagster, SkyPilot or anything from ``fleet/``, ``assets/``,
``pipelines/`` or ``infra/`` (see docs/architecture.md). Dependencies: torch, numpy,
boto3, pydantic, pyyaml.
"""
