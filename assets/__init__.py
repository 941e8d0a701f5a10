"""Dagster assets and asset checks: thin layers over fleet/ and checkpointing/."""
