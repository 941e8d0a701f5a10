"""The declared dependency direction (docs/architecture.md) holds for every import:

    checkpointing <- fleet <- infra <- pipelines(config, resources, ...) <- assets
                  <- pipelines(definitions, cli, commands)

A layer imports only layers to its left (and third-party code); ``checkpointing`` runs
inside the training process and imports none of the orchestration side, nor Dagster,
SkyPilot or SQLAlchemy; ``fleet`` knows no database and no Dagster; the node runner
(runs on the node) imports no ``assets``. Imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: pipelines modules below assets (assets may import them); the rest are the top layer
PIPELINES_LOWER = {"config", "resources", "validation", "node_runner", "home", "examples"}

#: layer -> top-level names it must not import
FORBIDDEN: dict[str, set[str]] = {
    "checkpointing": {"fleet", "infra", "pipelines", "assets", "dagster", "dagster_pipes",
                      "dagster_aws", "sky", "sqlalchemy", "alembic"},
    "fleet": {"infra", "pipelines", "assets", "dagster", "dagster_pipes", "dagster_aws",
              "sqlalchemy", "alembic"},
    "infra": {"pipelines", "assets", "dagster_pipes"},
    "pipelines_lower": {"assets", "pipelines.definitions", "pipelines.cli", "pipelines.commands"},
    "assets": {"pipelines.definitions", "pipelines.cli", "pipelines.commands"},
}


def _layer(path: Path, root: Path = REPO) -> str | None:
    rel = path.relative_to(root).parts
    top = rel[0]
    if top == "pipelines":
        name = rel[1].removesuffix(".py") if len(rel) > 1 else ""
        return "pipelines_lower" if name in PIPELINES_LOWER else "pipelines_upper"
    return top if top in FORBIDDEN else None


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _offenders(root: Path = REPO) -> list[str]:
    found = []
    for top in ("checkpointing", "fleet", "infra", "pipelines", "assets"):
        for path in sorted((root / top).rglob("*.py")):
            layer = _layer(path, root)
            bad = FORBIDDEN.get(layer or "", set())
            seen: set[int] = set()
            for lineno, name in _imports(path):
                parts = name.split(".")
                if (parts[0] in bad or ".".join(parts[:2]) in bad) and lineno not in seen:
                    seen.add(lineno)
                    found.append(f"{path.relative_to(root)}:{lineno} ({layer}) imports {name}")
    return sorted(found)


def test_every_layer_imports_only_layers_below_it() -> None:
    offenders = _offenders()
    assert not offenders, "dependency direction violated (docs/architecture.md):\n" + "\n".join(offenders)


def test_node_runner_imports_no_assets() -> None:
    names = [n for _, n in _imports(REPO / "pipelines" / "node_runner.py")]
    assert names and not [n for n in names if n.split(".")[0] == "assets"]


def test_the_check_would_catch_a_violation(tmp_path) -> None:
    """The checker itself: upward imports in lower layers are reported, allowed ones not."""
    (tmp_path / "fleet").mkdir()
    (tmp_path / "fleet" / "x.py").write_text("def f():\n    from assets import fleet_adapter\n")
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "node_runner.py").write_text("import assets.fleet_adapter\n")
    (tmp_path / "pipelines" / "cli.py").write_text("import assets.pipeline_assets\n")
    got = _offenders(tmp_path)
    assert len(got) == 2 and got[0].startswith("fleet/x.py:2") and "node_runner" in got[1]
