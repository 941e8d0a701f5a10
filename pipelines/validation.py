"""Semantic validation of pipeline configs against the catalog and the market.

``pipelines/config.py`` checks the *shape* of a pipeline YAML (types, ranges, unknown
fields). This module checks what the values *mean*, before anything runs:

* ``resources.accelerator``: known to the SkyPilot catalog (``common/accelerators.csv``
  and ``<cloud>/vms.csv``) or to the built-in price table (V100 = p3.2xlarge); on the
  local fleet, the accelerator its market emulates (an ``H9000`` must not be billed as
  a V100);
* ``resources.instance_type``: a catalog instance type carrying that accelerator and
  count; on the local fleet, the instance type its prices are for;
* ``resources.count``: an accelerator count some instance type offers; on the local
  fleet, the accelerators of the machine it bills per node (1 V100 on p3.2xlarge, 8 H100
  on the a3-highgpu-8g that gcp-h100-2025's files price);
* ``resources.zones``: zones of the local fleet's market (synthetic zones or trace
  files), or zones the catalog knows for the accelerator; inside ``resources.regions``;
* ``deadline_hours``: at least the stages' work (even on-demand cannot finish sooner);
* ``script`` / ``command``: the training script exists where the stage will run it;
* ``market``: ``trace_dir`` holds traces that pass the loader's checks (``MarketConfig.traces``,
  what the ``spot_market`` step reads), fault-injection keys name real stages.

Each problem is a :class:`Problem` naming the field path, the value as written and the
fix. The catalog folder is ``$SPOTFLEET_CATALOG_DIR``, else SkyPilot's own
``~/.sky/catalogs/v8``, else the reference copy ``../shared/data/skypilot-catalog-v8``
beside the project; without any, only the built-in table and the local market are
known, and SkyPilot pipelines are checked for what can be checked without a catalog.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import functools
import os
import re
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from fleet.market.traces import Trace
    from pipelines.config import PipelineConfig, StageConfig

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CATALOG_VERSION = "v8"
_AWS_ZONE_RE = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d[a-z]$")
_TRACE_NAME_RE = re.compile(r"^(?P<zone>[a-z0-9-]+?)_(?P<accelerator>[A-Za-z0-9]+)_(?P<count>\d+)\.json$")


@dataclass(frozen=True)
class Problem:
    """One semantic mistake: ``loc`` is the field path, ``message`` says what and how to fix."""

    loc: str
    message: str
    value: Any = None
    #: for a checkpoint store problem, ``StoreError.reason`` (``unreachable``, ``no_bucket``, ...)
    reason: str = ""

    def line(self) -> str:
        """``  - <loc>: <message> (got <value as written>)``: one line of the error report."""
        shown = _num(self.value) if isinstance(self.value, float) else repr(self.value)
        return f"  - {self.loc}: {self.message} (got {shown})"


# --------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class Catalog:
    """What a SkyPilot catalog folder (``catalogs/v8``) says, plus the built-in price table.

    ``instance_types``: type -> (accelerator, count); ``zones``: zone name -> region
    (per cloud); ``offered``: (ACCELERATOR upper case, count) -> instance types;
    ``type_zones``: instance type -> zone names with a spot quote.
    """

    source: str
    accelerators: frozenset[str]
    instance_types: dict[str, tuple[str, int]] = field(default_factory=dict)
    zones: dict[str, dict[str, str]] = field(default_factory=dict)
    type_zones: dict[str, frozenset[str]] = field(default_factory=dict)

    def canonical_accelerator(self, name: str) -> str | None:
        """The catalog's spelling of ``name`` (matched case-insensitively), or None."""
        by_lower = {a.lower(): a for a in self.accelerators}
        return by_lower.get(name.lower())

    def offered(self, accelerator: str, count: int | None = None) -> list[str]:
        """Instance types carrying ``accelerator`` (x ``count`` if given), sorted."""
        acc = accelerator.lower()
        return sorted(t for t, (a, n) in self.instance_types.items()
                      if a.lower() == acc and (count is None or n == count))

    def zones_for(self, accelerator: str) -> set[str]:
        out: set[str] = set()
        for t in self.offered(accelerator):
            out |= set(self.type_zones.get(t, ()))
        return out


def find_catalog_dir() -> Path | None:
    """The SkyPilot catalog folder validation reads (see the module docstring), or None."""
    cands = []
    if os.environ.get("SPOTFLEET_CATALOG_DIR"):
        cands.append(Path(os.environ["SPOTFLEET_CATALOG_DIR"]))
    sky_home = os.environ.get("SKY_RUNTIME_DIR") or os.path.expanduser("~")
    cands.append(Path(sky_home) / ".sky" / "catalogs" / CATALOG_VERSION)
    cands.append(PROJECT_ROOT.parent / "shared" / "data" / f"skypilot-catalog-{CATALOG_VERSION}")
    for c in cands:
        if (c / "common" / "accelerators.csv").is_file() or any(c.glob("*/vms.csv")):
            return c
    return None


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@functools.lru_cache(maxsize=8)
def load_catalog(catalog_dir: str | None) -> Catalog:
    """Read a ``catalogs/v8`` folder (csv only, no SkyPilot import: this runs at load time)."""
    from fleet.market.prices import FALLBACK_INSTANCE_TYPES

    fallback = {itype: (acc.upper(), 1) for acc, itype in FALLBACK_INSTANCE_TYPES.items()}
    accs = {a for a, _ in fallback.values()}
    types: dict[str, tuple[str, int]] = dict(fallback)
    zones: dict[str, dict[str, str]] = {}
    type_zones: dict[str, set[str]] = {}
    if catalog_dir is None:
        return Catalog("built-in price table only", frozenset(accs), types)
    root = Path(catalog_dir)
    accs |= {r["AcceleratorName"] for r in _read_csv(root / "common" / "accelerators.csv")
             if r.get("AcceleratorName")}
    for vms in sorted(root.glob("*/vms.csv")):
        cloud = vms.parent.name
        id_to_name = {r["AvailabilityZone"]: r["AvailabilityZoneName"]
                      for r in _read_csv(vms.parent / "az_mappings-default.csv")
                      if r.get("AvailabilityZone")}
        czones = zones.setdefault(cloud, {})
        for name in id_to_name.values():
            czones[name] = name[:-1] if name[-1:].isalpha() else name
        for r in _read_csv(vms):
            itype, acc = r.get("InstanceType"), r.get("AcceleratorName")
            if not itype or not acc:
                continue
            try:
                count = int(float(r.get("AcceleratorCount") or 0))
            except ValueError:
                continue
            types[itype] = (acc, count)
            accs.add(acc)
            az = id_to_name.get(r.get("AvailabilityZone", ""), r.get("AvailabilityZone", ""))
            if az:
                czones.setdefault(az, r.get("Region", ""))
                if r.get("SpotPrice"):
                    type_zones.setdefault(itype, set()).add(az)
    return Catalog(f"SkyPilot catalog {root}", frozenset(accs), types, zones,
                   {k: frozenset(v) for k, v in type_zones.items()})


def default_catalog() -> Catalog:
    found = find_catalog_dir()
    return load_catalog(str(found) if found else None)


# --------------------------------------------------------------------------- market


@dataclass(frozen=True)
class LocalMarket:
    """What the local fleet emulates for one pipeline: zones, accelerator, instance type."""

    kind: str
    zones: tuple[str, ...]
    accelerator: str
    instance_type: str
    all_synthetic_zones: tuple[str, ...] = ()
    trace_dir: str | None = None
    #: the instance type is the one the trace files price (``priced_instance_type``)
    file_prices: bool = False
    #: accelerators of one node (one machine of ``instance_type``); None when the priced
    #: files do not say (their ``price_info`` itemizes no GPUs)
    per_node: int | None = 1
    #: the trace files' instance labels (``h100_16`` for ``<zone>_h100_16.json``), for hints
    labels: tuple[str, ...] = ()


def local_market(cfg: PipelineConfig, traces: list[Trace] | None = None
                 ) -> tuple[LocalMarket | None, list[Problem]]:
    """The local fleet's market of ``cfg`` (None with problems when it cannot be read).
    A trace folder's instance type is the one its files price when they carry prices
    (``with_file_instance_type``: what the fleet bills at run time), read from ``traces``
    (the market's history traces, when the caller has loaded them) or from the folder."""
    from fleet.market.prices import FALLBACK_INSTANCE_TYPES

    m = cfg.market
    if m.kind == "traces":
        d = Path(m.trace_dir or "")
        if not d.is_dir():
            return None, [Problem("market.trace_dir", "no such folder; give a folder of spot-trace "
                                  "JSON files named <zone>_<accelerator>_<count>.json (e.g. "
                                  "../shared/data/spot-traces/availability/1-node/aws-02-15-2023)",
                                  m.trace_dir)]
        names = [_TRACE_NAME_RE.match(p.name) for p in sorted(d.glob("*.json"))]
        names = [n for n in names if n]
        if not names:
            return None, [Problem("market.trace_dir", "no trace files <zone>_<accelerator>_<count>.json "
                                  "in this folder; point it at a folder of spot traces", m.trace_dir)]
        acc = names[0]["accelerator"].upper()
        itype = FALLBACK_INSTANCE_TYPES.get(acc.lower(), "p3.2xlarge")
        labels = tuple(sorted({f"{n['accelerator']}_{n['count']}" for n in names}))
        market = LocalMarket("traces", tuple(n["zone"] for n in names), acc, itype,
                             trace_dir=str(d), labels=labels)
        if traces is None:
            traces, _ = _check_trace_files(cfg)  # a bad file: check_pipeline reports it
        return (market if traces is None else with_file_instance_type(market, traces)), []
    from fleet.market.synthetic import SyntheticMarketConfig, default_market_config

    allz = tuple(z.zone for z in default_market_config(9).zones)
    acc = str(SyntheticMarketConfig.model_fields["accelerator"].default)
    itype = FALLBACK_INSTANCE_TYPES.get(acc.lower(), "p3.2xlarge")
    return LocalMarket("synthetic", allz[: m.n_zones], acc, itype, allz), []


def _check_trace_files(cfg: PipelineConfig) -> tuple[list[Trace] | None, list[Problem]]:
    """The market's traces as every asset will read them (``MarketConfig.traces``: the
    loader's ``load_trace_dir`` / ``check_trace_set`` checks, the ``instance_types``
    filter and the history window's up check), now instead of in the ``spot_market``
    step (a Dagster traceback at run time until 2026-11-27). The loader's warnings are
    left to the run."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cfg.market.traces("history"), []
    except ValueError as exc:  # TraceFormatError too: the message names the file and the fix
        return None, [Problem("market.trace_dir", str(exc), cfg.market.trace_dir)]


def with_file_instance_type(market: LocalMarket, traces: list[Trace]) -> LocalMarket:
    """``market`` with the instance type the local fleet will bill on these traces: the
    type their files price (e.g. a3-highgpu-8g for the GCP H100 folder), as
    ``LocalFleetConfig.with_file_prices`` sets it at run time; unchanged for files without
    prices (until 2026-11-27 the check held stages to p3.2xlarge on any folder), and
    with the accelerators of one such machine as the files itemize them (8 for
    a3-highgpu-8g; None when they do not)."""
    from fleet.stats.preemption import priced_instance_type, trace_instance_type

    itype = priced_instance_type(traces)
    if itype is None:
        return market
    per_node = next((t.accelerators_per_instance for t in traces
                     if trace_instance_type(t) == itype and t.accelerators_per_instance), None)
    return replace(market, instance_type=itype, file_prices=True, per_node=per_node)


# --------------------------------------------------------------------------- helpers


def _num(x: float) -> str:
    """A number as the user wrote it: 24 not 24.0, 0.9 not 0.8999999."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _did_you_mean(value: str, choices: list[str] | set[str] | tuple[str, ...]) -> str:
    by_lower = {c.lower(): c for c in choices}
    m = difflib.get_close_matches(value.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[m[0]]!r}?)" if m else ""


def _script_candidates(script: str, roots: list[Path]) -> list[str]:
    names: list[str] = []
    for r in roots:
        parent = (r / script).parent
        if parent.is_dir():
            names += [str((parent / p.name).relative_to(r)) if (parent / p.name).is_relative_to(r)
                      else str(parent / p.name) for p in parent.glob("*.py")]
    return names


# --------------------------------------------------------------------------- checks


def check_pipeline(cfg: PipelineConfig, *, catalog: Catalog | None = None, cwd: Path | None = None,
                   project_root: Path = PROJECT_ROOT) -> list[Problem]:
    """Every semantic problem of one pipeline; locations are relative to the pipeline."""
    catalog = catalog or default_catalog()
    cwd = (cwd or Path.cwd()).resolve()
    problems: list[Problem] = []
    market: LocalMarket | None = None
    traces, tp = None, []
    if cfg.market.kind == "traces" and (cfg.provider != "local"
                                        or Path(cfg.market.trace_dir or "").is_dir()):
        traces, tp = _check_trace_files(cfg)  # read once, here
    if cfg.provider == "local":
        market, mp = local_market(cfg, traces)
        problems += mp
    if not any(p.loc == "market.trace_dir" for p in problems):
        problems += tp
    names = [s.name for s in cfg.stages]
    for key in ("inject_preemptions_at_steps", "lose_attempt_at_step"):
        for stage in getattr(cfg.market, key):
            if stage not in names:
                problems.append(Problem(f"market.{key}.{stage}", f"unknown stage {stage!r}; the "
                                        f"stages are {', '.join(names)}: rename the key to one of them",
                                        stage))
    total = sum(s.work_hours for s in cfg.stages)
    if cfg.deadline_hours < total - 1e-9:
        work = " + ".join(f"{s.name} {_num(s.work_hours)} h" for s in cfg.stages)
        problems.append(Problem(
            "deadline_hours",
            f"a deadline of {_num(cfg.deadline_hours)} h is shorter than the stages' work "
            f"({work} = {_num(round(total, 9))} h of work_hours): even on-demand cannot finish in "
            f"time; raise deadline_hours to at least {_num(round(total, 9))} or lower the stages' "
            "work_hours", cfg.deadline_hours))
    for i, stage in enumerate(cfg.stages):
        if not cfg.on_demand_fallback and not stage.resources.spot:
            problems.append(Problem(
                f"stages[{i}].resources.spot",
                "spot: false asks for on-demand nodes, but the pipeline's on_demand_fallback: false "
                "rules on-demand out: set spot: true, or on_demand_fallback: true", False))
        problems += [Problem(f"stages[{i}].{p.loc}", p.message, p.value)
                     for p in _check_stage(cfg, stage, market, catalog, cwd, project_root)]
    return problems


def _check_stage(cfg: PipelineConfig, stage: StageConfig, market: LocalMarket | None,
                 catalog: Catalog, cwd: Path, project_root: Path) -> list[Problem]:
    out: list[Problem] = []
    r = stage.resources
    out += _check_program(cfg, stage, cwd, project_root)
    # accelerator -------------------------------------------------------------
    acc = catalog.canonical_accelerator(r.accelerator)
    if acc is None:
        known = sorted(catalog.accelerators)
        out.append(Problem("resources.accelerator",
                           f"unknown accelerator {r.accelerator!r}: neither the {catalog.source} nor "
                           f"the built-in price table knows it{_did_you_mean(r.accelerator, known)}; "
                           f"use one of {', '.join(known)}", r.accelerator))
    elif market is not None and acc.lower() != market.accelerator.lower():
        out.append(Problem("resources.accelerator",
                           f"the local fleet's {market.kind} market emulates {market.accelerator} nodes "
                           f"({market.instance_type}) only, so this stage's {acc} would be billed at the "
                           f"{market.accelerator} price; use accelerator: {market.accelerator}, or provider: "
                           f"skypilot to run on real {acc} nodes", r.accelerator))
    # count / instance type -----------------------------------------------------
    if acc is not None and market is not None:
        if market.per_node is not None and r.count != market.per_node:
            out.append(_local_count(r.count, r.nodes, market))
        if r.instance_type is not None and r.instance_type != market.instance_type:
            if r.instance_type not in catalog.instance_types and not market.file_prices:
                out.append(_unknown_type(r.instance_type, catalog))
            else:
                how = ("the prices in market.trace_dir's files" if market.file_prices
                       else "market.spot_price_per_hour / on_demand_price_per_hour")
                out.append(Problem("resources.instance_type",
                                   f"the local fleet prices only {market.instance_type} ({how}); "
                                   f"remove instance_type or set it to {market.instance_type}",
                                   r.instance_type))
    elif acc is not None:
        out += _check_cloud_type(r.accelerator, acc, r.count, r.instance_type, catalog)
    # zones ---------------------------------------------------------------------
    seen: set[str] = set()
    for j, zone in enumerate(r.zones):
        loc = f"resources.zones[{j}]"
        if zone in seen:
            out.append(Problem(loc, "zone listed twice; list each zone once, in preference order", zone))
            continue
        seen.add(zone)
        region = zone[:-1] if zone[-1:].isalpha() else zone
        if market is not None:
            p = _check_local_zone(zone, market, cfg, loc)
        else:
            p = _check_cloud_zone(zone, acc, r.clouds, catalog, loc)
        if p is not None:
            out.append(p)
        elif r.regions and region not in r.regions:
            out.append(Problem(loc, f"zone {zone} is in region {region}, which resources.regions "
                                    f"({', '.join(r.regions)}) leaves out; add {region} to regions or "
                                    "remove the zone", zone))
    return out


def _local_count(count: int, nodes: int, market: LocalMarket) -> Problem:
    """``resources.count`` other than the accelerators of the machine the local fleet bills
    per node: what it is billed as, and the count and nodes that ask for that machine.
    Until 2026-11-27 this said "nodes with one H100 (a3-highgpu-8g)" on gcp-h100-2025,
    whose machine has 8, and advised count: 1 with 8 nodes (8 machines, 64 H100)."""
    n, acc, itype = market.per_node or 1, market.accelerator, market.instance_type
    if n == 1:
        return Problem("resources.count",
                       f"the local fleet emulates nodes with one {acc} ({itype}), so {count} would "
                       f"be billed as 1; use count: 1 (and nodes: {nodes * count} for more "
                       "accelerators)", count)
    want = nodes * count
    k = -(-want // n)
    return Problem("resources.count",
                   f"the local fleet emulates nodes of one {itype} with {n} {acc} (as "
                   f"market.trace_dir's files price it) and bills each node as that whole machine, so "
                   f"{count} would be billed as {n}; use count: {n} and nodes: {k} ({k * n} {acc}, "
                   f"the fewest whole machines for the {want} asked for)", count)


def _unknown_type(itype: str, catalog: Catalog) -> Problem:
    known = sorted(catalog.instance_types)
    return Problem("resources.instance_type",
                   f"unknown instance type {itype!r}: neither the {catalog.source} nor the built-in "
                   f"price table lists it{_did_you_mean(itype, known)}; use one of {', '.join(known)} "
                   "or remove instance_type (the planner picks one for the accelerator)", itype)


def _check_cloud_type(written: str, acc: str, count: int, itype: str | None,
                      catalog: Catalog) -> list[Problem]:
    out: list[Problem] = []
    if itype is not None:
        if itype not in catalog.instance_types:
            return [_unknown_type(itype, catalog)]
        a, n = catalog.instance_types[itype]
        if a.lower() != acc.lower() or n != count:
            out.append(Problem("resources.instance_type",
                               f"{itype} carries {a} x{n}, but the stage asks for {acc} x{count}; "
                               f"set accelerator: {a} and count: {n}, or remove instance_type (the "
                               f"planner picks one for {acc})", itype))
        return out
    any_count = catalog.offered(acc)
    if any_count and not catalog.offered(acc, count):
        have = ", ".join(f"x{catalog.instance_types[t][1]} ({t})" for t in any_count)
        out.append(Problem("resources.count",
                           f"no instance type offers {acc} x{count}; the {catalog.source} has {acc} "
                           f"{have}: use one of those counts (and more nodes)", count))
    return out


def _check_local_zone(zone: str, market: LocalMarket, cfg: PipelineConfig, loc: str) -> Problem | None:
    if zone in market.zones:
        return None
    have = ", ".join(market.zones)
    if market.kind == "traces":
        return Problem(loc, f"the local fleet's market has no trace for zone {zone!r}: "
                            f"market.trace_dir ({market.trace_dir}) has {have}"
                            f"{_did_you_mean(zone, market.zones)}; use some of those, or add "
                            f"{_trace_file_for(zone, market)} there, in the format of its "
                            "other files", zone)
    if zone in market.all_synthetic_zones:
        need = market.all_synthetic_zones.index(zone) + 1
        return Problem(loc, f"zone {zone} is not in the local fleet's market: the synthetic market "
                            f"has market.n_zones = {cfg.market.n_zones} zones ({have}); raise "
                            f"market.n_zones to {need} to include {zone}, or remove it", zone)
    return Problem(loc, f"unknown zone {zone!r}: the local fleet's synthetic market has the zones "
                        f"{have}{_did_you_mean(zone, market.all_synthetic_zones)}; use some of "
                        f"those (market.n_zones up to 9 adds "
                        f"{', '.join(market.all_synthetic_zones[len(market.zones):]) or 'none'})", zone)


def _trace_file_for(zone: str, market: LocalMarket) -> str:
    """The file a trace of ``zone`` would be in the market's folder, named like the files
    there (``<zone>_h100_16.json`` in gcp-h100-2025; until 2026-11-27 the hint always said
    ``<zone>_<accelerator>_1.json``)."""
    if len(market.labels) == 1:
        return f"{zone}_{market.labels[0]}.json"
    return f"{zone}_<label>.json (the folder's labels: {', '.join(market.labels)})"


def _check_cloud_zone(zone: str, acc: str | None, clouds: list[str], catalog: Catalog,
                      loc: str) -> Problem | None:
    if "aws" not in clouds:
        return None  # the catalog subset describes AWS only
    known = catalog.zones.get("aws", {})
    if known:
        if zone not in known:
            return Problem(loc, f"unknown zone {zone!r}: the {catalog.source} has no such AWS zone"
                                f"{_did_you_mean(zone, list(known))}; AWS zones are a region plus a "
                                f"letter, e.g. {sorted(known)[0]}", zone)
    elif not _AWS_ZONE_RE.match(zone):
        return Problem(loc, f"{zone!r} is not an AWS zone name: a zone is a region plus a letter, "
                            "e.g. us-east-1a (a region alone goes under resources.regions)", zone)
    if acc is not None:
        offered = catalog.zones_for(acc)
        if offered and zone not in offered:
            return Problem(loc, f"{acc} is not offered in {zone}: the {catalog.source} lists it in "
                                f"{', '.join(sorted(offered))}; use some of those", zone)
    return None


def _check_program(cfg: PipelineConfig, stage: StageConfig, cwd: Path, root: Path) -> list[Problem]:
    if stage.script is not None:
        p = Path(stage.script)
        roots = [p.parent] if p.is_absolute() else [cwd, root]
        found = [r / p for r in roots if (r / p).is_file()] if not p.is_absolute() else \
            ([p] if p.is_file() else [])
        if found:
            return []
        where = " and ".join(dict.fromkeys(str(r) for r in ([cwd, root] if not p.is_absolute()
                                                            else [p.parent])))
        hint = _did_you_mean(stage.script, _script_candidates(stage.script, [cwd, root]))
        return [Problem("script", f"training script not found (looked in {where}){hint}; give a "
                                  "path relative to the working directory or the project root, or "
                                  "an absolute one", stage.script)]
    cmd = (stage.command or [""])[0]
    if cfg.provider != "local" or not cmd:
        return []
    if ("/" in cmd and (Path(cmd).is_file() or (cwd / cmd).is_file())) or shutil.which(cmd):
        return []
    return [Problem("command[0]", "not an executable on PATH nor a file here; give the program's "
                                  "full path (e.g. /usr/bin/python3) or use script: for a Python file",
                    cmd)]


#: what to do about a checkpoint store that fails its access check, by ``StoreError.reason``
_STORE_FIXES = {
    "no_bucket": "create the bucket, or set {field} to s3://<an existing bucket>/<prefix>",
    "unreachable": "check AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3) in spotfleet's environment or "
                   "the stage's env: and that the S3 server is up, or set {field} to a directory",
    "no_credentials": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in "
                      "spotfleet's environment or the stage's env:",
    "access_denied": "check the access key, the secret and the bucket policy (or the directory's "
                     "permissions), or set {field} to a location this user may write",
}


def check_checkpoint_stores(cfg: PipelineConfig, base_dir: Path,
                            stages: list[StageConfig] | None = None) -> tuple[list[Problem], list[str]]:
    """Open each stage's checkpoint store and make one request (``check_access``), as a
    node would on its first save, BEFORE any node is launched: a bucket that does not
    exist, an endpoint that does not answer or missing credentials would otherwise fail
    every node at its first checkpoint (each one launched, billed and retried).

    Returns (problems, warnings). Run at job start only (it talks to the store), not when
    the code location loads. On SkyPilot the nodes get their own credentials (an instance
    role), so there a store this machine cannot reach or authenticate to is a warning;
    a missing bucket is a problem everywhere.
    """
    from checkpointing.stores.base import StoreError, open_store

    problems: list[Problem] = []
    warnings: list[str] = []
    seen: set[str] = set()  # one report per field: the stages under it share the bucket / endpoint
    for i, stage in enumerate(cfg.stages):
        if stages is not None and stage not in stages:
            continue
        uri = cfg.stage_checkpoint_uri(stage, base_dir)
        field_name = "checkpoint_uri" if stage.checkpoint_uri is None else f"stages[{i}].checkpoint_uri"
        if field_name in seen:
            continue
        shown = stage.checkpoint_uri if stage.checkpoint_uri is not None else cfg.checkpoint_uri
        kwargs, exact = _node_store_kwargs(uri, stage.env)
        try:
            open_store(uri, **kwargs).check_access()
        except StoreError as exc:
            seen.add(field_name)
            reason = getattr(exc, "reason", "")
            fix = _STORE_FIXES.get(reason, "fix {field} or the store it names").format(field=field_name)
            msg = (f"the checkpoint store of stage {stage.name} ({uri}) is not usable, so no node "
                   f"could save a checkpoint: {exc}. Fix: {fix}. Nothing was launched")
            if (cfg.provider != "local" or not exact) \
                    and reason in ("unreachable", "no_credentials", "access_denied"):
                warnings.append(f"{field_name}: {msg.replace('. Nothing was launched', '')} (from this "
                                "machine; the nodes may have their own credentials or network)")
            else:
                problems.append(Problem(field_name, msg, shown, reason=reason))
    return problems, warnings


#: AWS settings in a stage's ``env:`` that the check cannot apply to its own request (it
#: does not change this process's environment): with one of them, only a missing bucket is
#: an error, anything else a warning
_AWS_UNAPPLIED = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
                  "AWS_CA_BUNDLE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN")


def _node_store_kwargs(uri: str, stage_env: dict[str, str]) -> tuple[dict[str, Any], bool]:
    """``open_store`` keyword arguments that give the check the store a node of this stage
    opens: the stage's ``env:`` (endpoint, region, key pair, S3 bounds) over this process's
    environment. Second value: False when the stage sets AWS settings the check cannot apply."""
    if not uri.startswith("s3://"):
        return {}, True
    env = {**os.environ, **stage_env}
    kw: dict[str, Any] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        kw["endpoint_url"] = endpoint
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        kw["region"] = region
    if stage_env.get("AWS_ACCESS_KEY_ID") and stage_env.get("AWS_SECRET_ACCESS_KEY"):
        kw["access_key_id"] = stage_env["AWS_ACCESS_KEY_ID"]
        kw["secret_access_key"] = stage_env["AWS_SECRET_ACCESS_KEY"]
    for name, key in (("SPOTFLEET_S3_CONNECT_TIMEOUT_SECONDS", "connect_timeout_seconds"),
                      ("SPOTFLEET_S3_READ_TIMEOUT_SECONDS", "read_timeout_seconds"),
                      ("SPOTFLEET_S3_MAX_ATTEMPTS", "max_attempts")):
        if name in stage_env:
            with contextlib.suppress(ValueError):  # not a number: the node refuses it with its message
                kw[key] = int(float(stage_env[name])) if key == "max_attempts" else float(stage_env[name])
    return kw, not any(k in stage_env for k in _AWS_UNAPPLIED)


def check_pipelines(pipelines: list[PipelineConfig], **kw: Any) -> list[Problem]:
    """Semantic problems of several pipelines, located as ``pipelines[i].<field>``."""
    out: list[Problem] = []
    for i, cfg in enumerate(pipelines):
        out += [Problem(f"pipelines[{i}].{p.loc}", p.message, p.value) for p in check_pipeline(cfg, **kw)]
    return out
