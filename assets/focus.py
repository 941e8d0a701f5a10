"""FOCUS 1.2 export of every charge row, and a validator for the column rules we rely on.

Target: FinOps Open Cost and Usage Specification (FOCUS) **version 1.2**, Cost and
Usage dataset. One charge row = one node session's billed time on one UTC day (the
cost lines of that session and day summed): ``ChargeCategory`` "Usage",
``ChargeFrequency`` "Usage-Based", ``PricingCategory`` "Dynamic" for spot nodes
(the provider sets and changes the price) and "Standard" for on-demand nodes.

Prices and quantities: ``PricingQuantity`` / ``ConsumedQuantity`` are BILLED hours and
``ChargePeriodStart/End`` UTC on the market clock, as the statistics DB holds them
(real time on a real cloud; the emulated market's time on the local fleet, which
converts before it records), ``ListUnitPrice`` is the
on-demand price of the same node type (the public list price), no negotiated
discounts (``ContractedUnitPrice`` = ``ListUnitPrice``), no commitments
(``EffectiveCost`` = ``BilledCost``). ``BillingPeriodStart/End``: the calendar month.

Custom columns (prefixed ``x_`` as the spec requires): pipeline, stage, run, attempt,
node session, end reason, the split of ``BilledCost`` into useful work and the
checkpoint / membership (elastic shrink / grow pauses) / redo / first-launch / restart /
idle taxes (they sum to ``BilledCost``),
the on-demand fallback premium (``x_FallbackTaxCost``: on-demand price minus spot
price times hours; a PRICE split that overlaps the time split), the on-demand
equivalent of the useful work, and ``x_Unpriced`` (boolean): true on the rows of a node
session the provider could not price. FOCUS 1.2 has no column for "cost unknown"
(``BilledCost`` is mandatory and not nullable), so such a row carries ``BilledCost`` 0 (the
"no price" mark the DB stores, docs/cost-report.md "Unpriced sessions") and
``x_Unpriced`` true: an analyst filters them out of (or into) any sum with that column.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from assets import cost_tables as ct
from fleet.contract import session_cost_usd

FOCUS_VERSION = "1.2"

#: FOCUS 1.2 columns emitted, with (data type, nulls allowed)
COLUMNS: dict[str, tuple[str, bool]] = {
    "AvailabilityZone": ("String", True),
    "BilledCost": ("Decimal", False),
    "BillingAccountId": ("String", False),
    "BillingAccountName": ("String", True),
    "BillingCurrency": ("String", False),
    "BillingPeriodEnd": ("DateTime", False),
    "BillingPeriodStart": ("DateTime", False),
    "ChargeCategory": ("String", False),
    "ChargeClass": ("String", True),
    "ChargeDescription": ("String", True),
    "ChargeFrequency": ("String", True),
    "ChargePeriodEnd": ("DateTime", False),
    "ChargePeriodStart": ("DateTime", False),
    "CommitmentDiscountId": ("String", True),
    "ConsumedQuantity": ("Decimal", True),
    "ConsumedUnit": ("String", True),
    "ContractedCost": ("Decimal", False),
    "ContractedUnitPrice": ("Decimal", True),
    "EffectiveCost": ("Decimal", False),
    "InvoiceIssuerName": ("String", False),
    "ListCost": ("Decimal", False),
    "ListUnitPrice": ("Decimal", True),
    "PricingCategory": ("String", True),
    "PricingCurrency": ("String", True),
    "PricingQuantity": ("Decimal", True),
    "PricingUnit": ("String", True),
    "ProviderName": ("String", False),
    "PublisherName": ("String", False),
    "RegionId": ("String", True),
    "RegionName": ("String", True),
    "ResourceId": ("String", True),
    "ResourceName": ("String", True),
    "ResourceType": ("String", True),
    "ServiceCategory": ("String", False),
    "ServiceName": ("String", False),
    "ServiceSubcategory": ("String", True),
    "SkuId": ("String", True),
    "SkuPriceId": ("String", True),
    "SubAccountId": ("String", True),
    "SubAccountName": ("String", True),
    "Tags": ("JSON", True),
}
#: the columns FOCUS 1.2 makes Mandatory (must be present in every dataset)
MANDATORY = ("BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
             "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
             "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost",
             "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory",
             "ServiceName")
ALLOWED = {
    "ChargeCategory": {"Usage", "Purchase", "Tax", "Credit", "Adjustment"},
    "ChargeClass": {"Correction"},
    "ChargeFrequency": {"One-Time", "Recurring", "Usage-Based"},
    "PricingCategory": {"Standard", "Dynamic", "Committed", "Other"},
    "ServiceCategory": {"AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases",
                        "Developer Tools", "Multicloud", "Identity", "Integration", "Internet of Things",
                        "Management and Governance", "Media", "Migration", "Mobile", "Networking", "Security",
                        "Storage", "Web", "Other"},
}
#: the project's own columns; the x_*Cost taxes + x_UsefulCost sum to BilledCost
X_SPLIT = {"useful": "x_UsefulCost", "checkpoint": "x_CheckpointTaxCost", "membership": "x_MembershipTaxCost",
           "redo": "x_RedoTaxCost", "launch": "x_LaunchCost", "restart": "x_RestartTaxCost",
           "idle": "x_IdleTaxCost"}
X_COLUMNS = ["x_Pipeline", "x_Stage", "x_RunId", "x_Attempt", "x_NodeSessionId", "x_EndReason",
             *X_SPLIT.values(), "x_FallbackTaxCost", "x_OnDemandEquivalentCost", "x_Unpriced"]
DATETIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
PROVIDERS = {"aws": ("AWS", "Amazon Elastic Compute Cloud"), "gcp": ("Google Cloud", "Compute Engine"),
             "azure": ("Microsoft", "Virtual Machines"),
             "local": ("spotfleet local fleet", "spotfleet emulated compute")}
#: relative tolerance of the money identities (float summation only)
RTOL = 1e-9


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _month(day: dt.date) -> tuple[str, str]:
    start = dt.datetime(day.year, day.month, 1, tzinfo=dt.UTC)
    end = dt.datetime(day.year + (day.month == 12), day.month % 12 + 1, 1, tzinfo=dt.UTC)
    return start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ")


def focus_frame(data: ct.CostData) -> pd.DataFrame:
    """Every charge row (node session x UTC day) of a pipeline in FOCUS 1.2 form."""
    cols = list(COLUMNS) + X_COLUMNS
    if data.lines.empty or data.sessions.empty:
        return pd.DataFrame(columns=cols)
    sessions = data.sessions.set_index("id")
    prem = ct._fallback_by_session(data.sessions)
    prem.index = data.sessions["id"].to_numpy()
    rows = []
    for (sid, day), g in data.lines.groupby(["node_session_id", "day"], sort=True):
        s = sessions.loc[sid]
        d = dt.date.fromisoformat(str(day))
        day_start = dt.datetime.combine(d, dt.time(), dt.UTC).timestamp()
        start = max(float(s["launched_at"]), day_start)
        end = min(float(s["ended_at"]), day_start + 86400.0)
        # whole seconds (the FOCUS DateTime format); a sub-second slice keeps a 1 s period
        t0, t1 = math.floor(start), max(math.ceil(end), math.floor(start) + 1)
        billed = float(g["dollars"].sum())
        hours = float(g["seconds"].sum()) / 3600.0
        list_price = float(s["on_demand_price_per_hour"]) if pd.notna(s["on_demand_price_per_hour"]) \
            else float(s["price_per_hour"])
        list_cost = session_cost_usd(list_price, 0.0, hours * 3600.0)  # the same hours at list price
        by_cat = g.groupby("category")["dollars"].sum()
        provider, service = PROVIDERS.get(str(s["cloud"]), (str(s["cloud"]), f"{s['cloud']} compute"))
        spot = bool(s["spot"])
        price = pd.to_numeric(s["price_per_hour"], errors="coerce")
        unpriced = bool(pd.isna(price) or price <= 0)  # the rule of cost_tables.unpriced_sessions
        share = billed / float(s["cost_usd"]) if float(s["cost_usd"]) > 0 else 0.0
        bp_start, bp_end = _month(d)
        row = {
            "AvailabilityZone": s["zone"], "BilledCost": billed, "BillingAccountId": f"spotfleet:{s['pipeline']}",
            "BillingAccountName": str(s["pipeline"]), "BillingCurrency": "USD",
            "BillingPeriodEnd": bp_end, "BillingPeriodStart": bp_start, "ChargeCategory": "Usage",
            "ChargeClass": None,
            "ChargeDescription": (f"{s['instance_type']} {'spot' if spot else 'on-demand'} node {s['node_id']} "
                                  f"in {s['zone']}: stage {s['stage']}, attempt {int(s['attempt'])}"),
            "ChargeFrequency": "Usage-Based", "ChargePeriodEnd": _iso(t1), "ChargePeriodStart": _iso(t0),
            "CommitmentDiscountId": None, "ConsumedQuantity": hours, "ConsumedUnit": "Hours",
            "ContractedCost": list_cost, "ContractedUnitPrice": list_price, "EffectiveCost": billed,
            "InvoiceIssuerName": provider, "ListCost": list_cost, "ListUnitPrice": list_price,
            "PricingCategory": "Dynamic" if spot else "Standard", "PricingCurrency": "USD",
            "PricingQuantity": hours, "PricingUnit": "Hours", "ProviderName": provider, "PublisherName": provider,
            "RegionId": s["region"], "RegionName": s["region"], "ResourceId": str(s["node_id"]),
            "ResourceName": str(s["node_id"]), "ResourceType": "Virtual Machine", "ServiceCategory": "Compute",
            "ServiceName": service, "ServiceSubcategory": "Virtual Machines", "SkuId": str(s["instance_type"]),
            "SkuPriceId": f"{s['instance_type']}:{s['zone']}:{'spot' if spot else 'on-demand'}",
            "SubAccountId": None, "SubAccountName": None,
            "Tags": json.dumps({"pipeline": str(s["pipeline"]), "stage": str(s["stage"]),
                                "run_id": str(s["run_id"])}, sort_keys=True),
            "x_Pipeline": str(s["pipeline"]), "x_Stage": str(s["stage"]), "x_RunId": str(s["run_id"]),
            "x_Attempt": int(s["attempt"]), "x_NodeSessionId": int(sid), "x_EndReason": str(s["end_reason"]),
            "x_FallbackTaxCost": float(prem.get(sid, 0.0)) * share,
            "x_OnDemandEquivalentCost": float(g["on_demand_dollars"].sum()),
            "x_Unpriced": unpriced,
        }
        for cat, col in X_SPLIT.items():
            row[col] = float(by_cat.get(cat, 0.0))
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def validate(frame: pd.DataFrame) -> list[str]:
    """Problems against the FOCUS 1.2 column rules (empty list: valid). Each names the column."""
    problems: list[str] = []
    missing = [c for c in MANDATORY if c not in frame.columns]
    problems += [f"{c}: mandatory FOCUS {FOCUS_VERSION} column is missing" for c in missing]
    for c in frame.columns:
        if c not in COLUMNS and not c.startswith("x_"):
            problems.append(f"{c}: not a FOCUS {FOCUS_VERSION} column; custom columns must start with 'x_'")
    n = len(frame)
    for c, (kind, nullable) in COLUMNS.items():
        if c not in frame.columns:
            continue
        col = frame[c]
        nulls = col.isna()
        if not nullable and nulls.any():
            problems.append(f"{c}: must not be null ({int(nulls.sum())} of {n} rows are)")
        vals = col[~nulls]
        if kind == "Decimal":
            num = pd.to_numeric(vals, errors="coerce")
            if num.isna().any() or not all(math.isfinite(float(v)) for v in num):
                problems.append(f"{c}: must be a valid decimal (got {vals[num.isna()].head(3).tolist()})")
        elif kind == "DateTime":
            bad = [v for v in vals if not (isinstance(v, str) and DATETIME_RE.match(v))]
            if bad:
                problems.append(f"{c}: must be ISO 8601 UTC 'YYYY-MM-DDTHH:MM:SSZ' (got {bad[:3]})")
        elif kind == "JSON":
            for v in vals:
                try:
                    ok = isinstance(json.loads(v), dict)
                except (TypeError, ValueError):
                    ok = False
                if not ok:
                    problems.append(f"{c}: must be a JSON object of key-value pairs (got {v!r})")
                    break
        else:
            bad = [v for v in vals if not isinstance(v, str)]
            if bad:
                problems.append(f"{c}: must be a string (got {bad[:3]})")
        if c in ALLOWED:
            bad = sorted({str(v) for v in vals if v not in ALLOWED[c]})
            if bad:
                problems.append(f"{c}: {bad} not among the allowed values {sorted(ALLOWED[c])}")
    for c in ("BillingCurrency", "PricingCurrency"):
        if c in frame.columns:
            bad = sorted({str(v) for v in frame[c].dropna() if not re.fullmatch(r"[A-Z]{3}", str(v))})
            if bad:
                problems.append(f"{c}: must be an ISO 4217 currency code (got {bad})")
    if n == 0:
        return problems
    problems += _row_rules(frame)
    return problems


def _close(a: pd.Series, b: pd.Series) -> pd.Series:
    return (a - b).abs() <= RTOL * b.abs().clip(lower=1.0)


def _row_rules(f: pd.DataFrame) -> list[str]:
    out: list[str] = []

    def ts(c: str) -> pd.Series:
        return pd.to_datetime(f[c], utc=True, errors="coerce")

    if {"ChargePeriodStart", "ChargePeriodEnd"} <= set(f.columns):
        bad = ~(ts("ChargePeriodStart") < ts("ChargePeriodEnd"))
        if bad.any():
            out.append(f"ChargePeriodStart must be before ChargePeriodEnd (inclusive start, exclusive end): "
                       f"{int(bad.sum())} row(s) are not")
    if {"BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd"} <= set(f.columns):
        bad = ~((ts("BillingPeriodStart") <= ts("ChargePeriodStart")) & (ts("ChargePeriodEnd") <= ts("BillingPeriodEnd"))
                & (ts("BillingPeriodStart") < ts("BillingPeriodEnd")))
        if bad.any():
            out.append(f"ChargePeriodStart/End must lie within BillingPeriodStart/End: {int(bad.sum())} row(s) do not")
    if "PricingCategory" in f.columns and "ChargeCategory" in f.columns:
        need = f["ChargeCategory"].isin(["Usage", "Purchase"]) & f.get("ChargeClass", pd.Series(None, index=f.index)).ne("Correction")
        bad = need & f["PricingCategory"].isna()
        if bad.any():
            out.append(f"PricingCategory: must not be null for Usage/Purchase charges ({int(bad.sum())} rows)")
        if "SkuPriceId" in f.columns:
            bad = f["SkuPriceId"].isna() & f["PricingCategory"].notna()
            if bad.any():
                out.append(f"PricingCategory: must be null when SkuPriceId is null ({int(bad.sum())} rows)")
        tax = f["ChargeCategory"].eq("Tax") & f["PricingCategory"].notna()
        if tax.any():
            out.append("PricingCategory: must be null when ChargeCategory is 'Tax'")
    for cost, price in (("ListCost", "ListUnitPrice"), ("ContractedCost", "ContractedUnitPrice")):
        if {cost, price, "PricingQuantity"} <= set(f.columns):
            has = f[price].notna() & f["PricingQuantity"].notna()
            prod = f.loc[has, price].astype(float) * f.loc[has, "PricingQuantity"].astype(float)
            bad = ~_close(f.loc[has, cost].astype(float), prod)
            if bad.any():
                out.append(f"{cost}: must equal {price} x PricingQuantity ({int(bad.sum())} rows differ)")
    if {"EffectiveCost", "BilledCost", "CommitmentDiscountId", "ChargeCategory"} <= set(f.columns):
        plain = f["CommitmentDiscountId"].isna() & f["ChargeCategory"].eq("Usage")
        bad = ~_close(f.loc[plain, "EffectiveCost"].astype(float), f.loc[plain, "BilledCost"].astype(float))
        if bad.any():
            out.append(f"EffectiveCost: must equal BilledCost without commitment discounts ({int(bad.sum())} rows)")
    present = [c for c in X_SPLIT.values() if c in f.columns]
    if present and len(present) < len(X_SPLIT):
        missing = [c for c in X_SPLIT.values() if c not in f.columns]
        out.append(f"{', '.join(missing)}: missing from the x_ cost split ({', '.join(present)} present); "
                   f"export every split column so that they sum to BilledCost")
    if set(X_SPLIT.values()) | {"BilledCost"} <= set(f.columns):
        split = sum(f[c].astype(float) for c in X_SPLIT.values())
        bad = ~_close(split, f["BilledCost"].astype(float))
        if bad.any():
            out.append(f"x_UsefulCost + x_*TaxCost + x_LaunchCost must equal BilledCost ({int(bad.sum())} rows differ)")
    out += _unpriced_rules(f)
    neg = [c for c in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "PricingQuantity")
           if c in f.columns and (f[c].astype(float) < 0).any()]
    out += [f"{c}: negative on a Usage charge" for c in neg]
    return out


def _unpriced_rules(f: pd.DataFrame) -> list[str]:
    """Project rules for ``x_Unpriced``: a boolean; true only on a row billed $0; and a Usage
    row billed $0 for a positive quantity must carry it (no VM is free: a silent $0 would read
    as a real price)."""
    out: list[str] = []
    if "x_Unpriced" in f.columns:
        bad = [v for v in f["x_Unpriced"] if not isinstance(v, bool | np.bool_)]
        if bad:
            out.append(f"x_Unpriced: must be a boolean (got {bad[:3]})")
            return out
        marked = f["x_Unpriced"].astype(bool)
    else:
        marked = pd.Series(False, index=f.index)
    if "BilledCost" not in f.columns:
        return out
    billed = pd.to_numeric(f["BilledCost"], errors="coerce")
    bad = marked & billed.ne(0)
    if bad.any():
        out.append(f"x_Unpriced: true on {int(bad.sum())} row(s) whose BilledCost is not 0")
    if {"PricingQuantity", "ChargeCategory"} <= set(f.columns):
        qty = pd.to_numeric(f["PricingQuantity"], errors="coerce").fillna(0.0)
        silent = f["ChargeCategory"].eq("Usage") & billed.eq(0) & qty.gt(0) & ~marked
        if silent.any():
            out.append(f"BilledCost: 0 for a positive PricingQuantity on {int(silent.sum())} Usage row(s) "
                       f"without x_Unpriced true (an unpriced session must be marked, never a silent $0)")
    return out


def reconcile(frame: pd.DataFrame, data: ct.CostData) -> tuple[float, float]:
    """(sum of BilledCost, billed cost of the node sessions) in $: they must match."""
    billed = float(frame["BilledCost"].astype(float).sum()) if not frame.empty else 0.0
    sessions = float(data.sessions["cost_usd"].sum()) if not data.sessions.empty else 0.0
    return billed, sessions


def write_focus(frame: pd.DataFrame, stem: Path) -> dict[str, Path]:
    """``<stem>.csv`` always; ``<stem>.parquet`` when pyarrow is installed (DateTime as UTC timestamps)."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    out = {"focus_csv": stem.with_suffix(".csv")}
    frame.to_csv(out["focus_csv"], index=False)
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return out
    pq = frame.copy()
    for c, (kind, _) in COLUMNS.items():
        if kind == "DateTime" and c in pq.columns:
            pq[c] = pd.to_datetime(pq[c], utc=True)
    pq.to_parquet(stem.with_suffix(".parquet"), index=False)
    out["focus_parquet"] = stem.with_suffix(".parquet")
    return out


def read_focus_csv(path: Path) -> pd.DataFrame:
    """Read an exported CSV back with FOCUS types (strings stay strings, nulls stay null)."""
    dtypes = {c: ("float64" if kind == "Decimal" else "object") for c, (kind, _) in COLUMNS.items()}
    frame = pd.read_csv(path, dtype=dtypes, keep_default_na=False, na_values=[""])
    return frame.astype(object).where(frame.notna(), None).astype(
        {c: "float64" for c, (k, _) in COLUMNS.items() if k == "Decimal" and c in frame.columns})
