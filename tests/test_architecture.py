"""The declared dependency direction (docs/architecture.md) holds for every import:

    checkpointing <- fleet <- infra <- pipelines(config, resources, ...) <- assets
                  <- pipelines(definitions, cli, commands)

A layer imports only layers to its left (and third-party code); ``checkpointing`` runs
inside the training process and imports none of the orchestration side, nor Dagster,
SkyPilot or SQLAlchemy; ``fleet`` knows no database and no Dagster; the node runner
(runs on the node) imports no ``assets``; only the local fleet, the emulator, the provider
registry and the local fleet's commands import ``fleet.providers.local`` / ``fleet.emulation``
(compressed time). Imports inside functions count too.
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


#: compressed emulator time lives in these packages (docs/architecture.md, "Where things live")
COMPRESSED_TIME = ("fleet.providers.local", "fleet.emulation")
#: the only modules outside them that may import them: the provider registry (it builds the
#: local provider by name) and the commands that run the local fleet by hand
COMPRESSED_TIME_IMPORTERS = {"fleet/providers/registry.py", "pipelines/commands/local_fleet.py",
                             "pipelines/commands/main_job.py", "pipelines/commands/main_fleet.py"}


def _compressed_time_leaks(root: Path = REPO) -> list[str]:
    found = []
    for top in ("checkpointing", "fleet", "infra", "pipelines", "assets"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel in COMPRESSED_TIME_IMPORTERS or rel.startswith(("fleet/providers/local/", "fleet/emulation/")):
                continue
            lines: dict[int, str] = {}
            for lineno, name in _imports(path):
                if any(name == p or name.startswith(p + ".") for p in COMPRESSED_TIME):
                    lines.setdefault(lineno, name)
            found += [f"{rel}:{lineno} imports {name}" for lineno, name in lines.items()]
    return sorted(found)


def test_compressed_time_stays_in_the_local_fleet() -> None:
    """Nothing else (the SkyPilot provider, the shared provider code, the DB, the planner,
    the assets) imports the local fleet or the emulator: what they record and plan is in
    market seconds (fleet/contract.py); shared provider code lives in fleet/providers/."""
    leaks = _compressed_time_leaks()
    assert not leaks, "compressed time leaves fleet/providers/local, fleet/emulation:\n" + "\n".join(leaks)


def test_the_compressed_time_check_would_catch_a_leak(tmp_path) -> None:
    (tmp_path / "fleet" / "providers" / "skypilot").mkdir(parents=True)
    (tmp_path / "fleet" / "providers" / "skypilot" / "p.py").write_text(
        "def f():\n    from fleet.providers.local.clock import x\n")
    (tmp_path / "fleet" / "providers" / "local").mkdir()
    (tmp_path / "fleet" / "providers" / "local" / "ok.py").write_text("import fleet.emulation.injector\n")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "a.py").write_text("from fleet.emulation import injector\n")
    got = _compressed_time_leaks(tmp_path)
    assert [g.split(" ")[0] for g in got] == ["assets/a.py:1", "fleet/providers/skypilot/p.py:2"]
