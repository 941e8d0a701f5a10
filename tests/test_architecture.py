"""The training-side library never imports the orchestration side."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN = {"dagster", "dagster_pipes", "sky", "fleet", "assets", "pipelines", "infra", "sqlalchemy"}


def test_checkpointing_imports_only_training_side() -> None:
    offenders = []
    for path in (REPO / "checkpointing").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert not offenders, "\n".join(offenders)
