"""Checkpoint stores: a local directory and S3 (boto3). See ``base.CheckpointStore``."""

from checkpointing.stores.base import CheckpointStore, StoreError, open_store

__all__ = ["CheckpointStore", "StoreError", "open_store"]
