"""The verification parts of a card, read from where qdrift leaves results.

`tool_calls_from_verify(dir)` reads a `qdrift verify run` output directory (report.json);
`short_form_from_store` and `long_horizon_from_store` read a sweep store and pair the variant with
the baseline item by item (episode by episode) with `qdrift.stats.paired_from_rows`; success rates
get Wilson intervals (statsmodels).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from statsmodels.stats.proportion import proportion_confint

from qdrift.verify.requests import file_sha256


def _estimate(row: dict | None, method: str) -> dict | None:
    if row is None:
        return None
    return {"estimate": row["estimate"], "ci_low": row["ci_low"], "ci_high": row["ci_high"],
            "p_value": row.get("p_value"), "method": method}


def _served_fingerprints(verify_dir: Path, endpoint: str) -> list[str]:
    """The `system_fingerprint`s in the endpoint's answers: what the server says it served."""
    from qdrift.backends.endpoint import read_journal
    from qdrift.verify.run import journal_path

    journal = journal_path(verify_dir, endpoint)
    found = {o.response.get("system_fingerprint") for o in read_journal(journal).values()
             if o.ok and isinstance(o.response, dict)} if journal.exists() else set()
    return sorted(f for f in found if isinstance(f, str) and f)


def tool_calls_from_verify(verify_dir: str | Path, endpoint: str | None = None) -> tuple[dict, list[dict]]:
    """(the card's `tool_calls` block, data entries) for one endpoint of a verify run."""
    path = Path(verify_dir) / "report.json"
    if not path.is_file():
        raise FileNotFoundError(f"no report.json in {verify_dir}; run `qdrift verify run ... --out {verify_dir}` first")
    report = json.loads(path.read_text(encoding="utf-8"))
    names = sorted(report["endpoints"])
    if endpoint is None:
        if len(names) != 1:
            raise ValueError(f"{path} verifies {len(names)} endpoints ({', '.join(names) or 'none'}); "
                             "name the one this card describes (--verify-endpoint)")
        endpoint = names[0]
    if endpoint not in report["endpoints"]:
        raise ValueError(f"endpoint {endpoint!r} is not in {path}; it has: {', '.join(names)}")
    result = report["endpoints"][endpoint]
    rows = {r["quantity"]: r for r in result["rows"]}
    meta = report.get("meta", {})
    if "requests_sha256" not in meta:
        raise ValueError(f"{path} has no requests_sha256 in its meta; it was not written by `qdrift verify run`")
    block = {
        "endpoint": endpoint,
        "reference": report["reference"],
        "reference_runs": report["reference_runs"],
        "requests": report["requests"],
        # the comparison sees only requests every run answered: say how many that was
        "requests_analysed": result.get("n", {}).get("requests"),
        "requests_dropped": result.get("n", {}).get("dropped"),
        "requests_file": meta.get("requests_file"),
        "requests_sha256": meta["requests_sha256"],
        "margin": report.get("margin"),
        "alpha": report.get("alpha", 0.05),
        "validity_difference": _estimate(rows.get("validity - reference"), "paired difference (CLT)"),
        "trigger_f1": _estimate(rows.get("trigger F1"), "paired bootstrap over requests"),
        "trigger_f1_floor": _estimate(rows.get("trigger F1 floor"), "reference vs reference, paired bootstrap"),
        "trigger_agreement_minus_floor": _estimate(rows.get("trigger agreement - floor"), "paired difference (CLT)"),
        "schema_accuracy": _estimate(rows.get("schema accuracy (endpoint)"), "Wilson"),
        "conclusion": result["conclusion"],
        "verified": meta.get("finished"),
        "served_fingerprints": _served_fingerprints(Path(verify_dir), endpoint),
    }
    data = [{"role": "tool-call requests", "path": str(meta.get("requests_file")), "sha256": meta["requests_sha256"]},
            {"role": "verification report", "path": str(path), "sha256": file_sha256(path)}]
    return block, data


def _only_model(rows: list[dict], model: str | None) -> list[dict]:
    models = sorted({r["model"] for r in rows})
    if model is None and len(models) > 1:
        raise ValueError(f"the store holds several models ({', '.join(models)}); name one (--store-model)")
    return [r for r in rows if model is None or r["model"] == model]


def _configs(rows: list[dict], baseline: str, variant: str, what: str) -> None:
    have = {r["config"] for r in rows}
    for name in (baseline, variant):
        if name not in have:
            raise ValueError(f"no {what} rows for config {name!r} in the store; configs there: {sorted(have)}")


def short_form_from_store(store, baseline: str, variant: str, model: str | None = None,
                          alpha: float = 0.05) -> list[dict[str, Any]]:
    """Per short-form task: accuracy of baseline and variant, and the paired delta with its interval."""
    from qdrift.stats import paired_from_rows

    rows = _only_model(store.rows("item"), model)
    if not rows:
        return []
    _configs(rows, baseline, variant, "short-form")
    out = []
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(r)
    for task, items in sorted(by_task.items()):
        pc = paired_from_rows(items, "config", baseline, variant, item_cols=["item"], outcome="correct",
                              alpha=alpha, n_boot=0)
        out.append({"task": task, "baseline": baseline, "items": pc.n["items"],
                    "accuracy_baseline": pc.row(quantity=f"accuracy {baseline}")["estimate"],
                    "accuracy": pc.row(quantity=f"accuracy {variant}")["estimate"],
                    "delta": _estimate(pc.row(quantity="difference (CLT)"), "paired difference (CLT)")})
    return out


def long_horizon_from_store(store, baseline: str, variant: str, model: str | None = None,
                            alpha: float = 0.05) -> list[dict[str, Any]]:
    """Per (environment, horizon): the variant's success with a Wilson interval and the paired delta."""
    from qdrift.stats import paired_from_rows

    rows = _only_model(store.rows("episode"), model)
    if not rows:
        return []
    _configs(rows, baseline, variant, "agent episode")
    cells: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in rows:
        cells[(r.get("env") or r["task"], int(r["horizon"]))].append(r)
    out = []
    for (env, horizon), eps in sorted(cells.items()):
        var = [r for r in eps if r["config"] == variant]
        k, n = sum(bool(r["success"]) for r in var), len(var)
        lo, hi = proportion_confint(k, n, alpha=alpha, method="wilson")
        pc = paired_from_rows(eps, "config", baseline, variant, item_cols=["seed", "trial"], outcome="success",
                              alpha=alpha, n_boot=0)
        out.append({"env": env, "horizon": horizon, "episodes": n,
                    "success_baseline": pc.row(quantity=f"accuracy {baseline}")["estimate"],
                    "success": {"estimate": k / n, "ci_low": float(lo), "ci_high": float(hi), "method": "Wilson"},
                    "delta": _estimate(pc.row(quantity="difference (CLT)"), "paired difference (CLT)")})
    return out
