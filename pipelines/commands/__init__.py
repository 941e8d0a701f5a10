"""CLI subcommand modules; each exposes ``register(subparsers)`` and sets ``handler``."""
