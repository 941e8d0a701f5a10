"""Run the example training script's ``main`` inside the test process (the reference run).

Saves a process start-up per reference run; the code path is the same as the
subprocess runs the tests compare against.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path


def run_main_in_process(script: Path, flags: Sequence[str], env: dict[str, str],
                        module_name: str) -> None:
    """Import ``script`` as ``module_name`` and run ``main(flags)`` with exactly ``env``.

    ``os.environ`` and torch's thread count are restored afterwards; a non-zero return
    fails the calling test.
    """
    import torch

    spec = importlib.util.spec_from_file_location(module_name, script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    saved, threads = dict(os.environ), torch.get_num_threads()
    os.environ.clear()
    os.environ.update(env)
    try:
        assert module.main(list(flags)) == 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
        torch.set_num_threads(threads)
