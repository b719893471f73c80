"""The verification parts of a card, read from where qdrift leaves results.

`tool_calls_from_verify(dir)` reads a `qdrift verify run` output directory (report.json);
`short_form_from_store` and `long_horizon_from_store` read a sweep store and pair the variant with
the baseline item by item (episode by episode) with `qdrift.stats.paired_from_rows`, one row per task
(environment and horizon) and setting: cells differing in knobs, prompt, dtype, device or qdrift version
are different measurements and are never pooled; success rates get Wilson intervals (statsmodels).
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


def _served_fingerprints(journals: list[Path]) -> list[str]:
    """The `system_fingerprint`s in the answers of these journals: what the server says it served."""
    from qdrift.backends.endpoint import read_journal

    found = {o.response.get("system_fingerprint") for journal in journals if journal.exists()
             for o in read_journal(journal).values() if o.ok and isinstance(o.response, dict)}
    return sorted(f for f in found if isinstance(f, str) and f)


def tool_calls_from_verify(verify_dir: str | Path, endpoint: str | None = None) -> tuple[dict, list[dict]]:
    """(the card's `tool_calls` block, data entries) for one endpoint of a verify run.

    The block names the model the requests asked for (`model`, the run's --model) and what the
    endpoint's and the reference's answers say they served (`served_fingerprints`,
    `reference_fingerprints`): the verdict is relative to that reference, whatever it served."""
    from qdrift.verify.run import journal_path

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
    for key in ("requests_sha256", "model"):
        if key not in meta:
            raise ValueError(f"{path} has no {key} in its meta; it was not written by `qdrift verify run`")
    block = {
        "endpoint": endpoint,
        "model": meta["model"],
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
        "served_fingerprints": _served_fingerprints([journal_path(verify_dir, endpoint)]),
        "reference_fingerprints": _served_fingerprints([journal_path(verify_dir, report["reference"], k)
                                                        for k in range(1, report["reference_runs"] + 1)]),
    }
    data = [{"role": "tool-call requests", "path": str(meta.get("requests_file")), "sha256": meta["requests_sha256"]},
            {"role": "verification report", "path": str(path), "sha256": file_sha256(path)}]
    return block, data


def store_model(store, model: str | None = None) -> str | None:
    """The model whose results a card takes from `store`: `model` when the store holds it, else the
    store's only one (None for a store with no results). Any other name is refused: a card read for a
    model the store never ran would say "none recorded" instead of naming the mistake."""
    models = sorted({c["config"].get("model") for c in store.cells("done")} - {None})
    if model is not None and model not in models:
        raise ValueError(f"the store has no results of model {model!r} (--store-model); its models: "
                         f"{', '.join(models) or 'none'}")
    if model is None and len(models) > 1:
        raise ValueError(f"the store holds several models ({', '.join(models)}); name one (--store-model)")
    return model if model is not None else (models[0] if models else None)


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


def _paired_groups(store, rows: list[dict], baseline: str, variant: str, place) -> list[tuple]:
    """(place, setting, variant rows, baseline rows) per place (`place(row)`: a task, or an environment
    and horizon) and setting of the variant's cells, each with the baseline's rows of that place and
    setting. A variant setting the baseline was not measured in is refused: a delta pairs like with like."""
    from qdrift.compare import VARIANT_ONLY, setting
    from qdrift.store import canonical_json

    settings = {c["key"]: c["config"] for c in store.cells("done")}
    var: dict[tuple, list[dict]] = defaultdict(list)
    base: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        config = settings[r["cell"]]
        if r["config"] == variant:
            var[(place(r), canonical_json(setting(config)))].append(r)
        if r["config"] == baseline:
            base[(place(r), canonical_json(setting(config, VARIANT_ONLY)))].append(r)
    out = []
    for (where, key), var_rows in sorted(var.items()):
        measured_in = json.loads(key)
        base_rows = base.get((where, canonical_json(setting(measured_in, VARIANT_ONLY))))
        if not base_rows:
            have = [k for w, k in sorted(base) if w == where]
            raise ValueError(f"the store has no {baseline!r} results of {_place_text(where)} in the setting "
                             f"{variant!r} was measured in ({key}); the baseline's settings there: "
                             f"{'; '.join(have) or 'none'}. A delta pairs results measured alike: measure the "
                             "baseline in that setting")
        out.append((where, measured_in, var_rows, base_rows))
    return out


def _place_text(where) -> str:
    return f"{where[0]} L={where[1]}" if isinstance(where, tuple) else str(where)


# The card of the baseline itself: no delta to state (a difference of a run from itself is no finding).
_NO_DELTA = {"estimate": None, "ci_low": None, "ci_high": None, "method": "none: the card's spec is the baseline"}


def short_form_from_store(store, baseline: str, variant: str, model: str | None = None,
                          alpha: float = 0.05) -> list[dict[str, Any]]:
    """Per short-form task and setting: accuracy of baseline and variant, and the paired delta with its interval."""
    from qdrift.stats import paired_from_rows

    rows = _only_model(store.rows("item"), model)
    if not rows:
        return []
    _configs(rows, baseline, variant, "short-form")
    out = []
    for task, setting, items, base in _paired_groups(store, rows, baseline, variant, lambda r: r["task"]):
        if variant == baseline:
            acc = sum(bool(r["correct"]) for r in items) / len(items)
            out.append({"task": task, "setting": setting, "baseline": baseline, "items": len(items),
                        "accuracy_baseline": acc, "accuracy": acc, "delta": dict(_NO_DELTA)})
            continue
        pc = paired_from_rows(items + base, "config", baseline, variant, item_cols=["item"], outcome="correct",
                              alpha=alpha, n_boot=0)
        out.append({"task": task, "setting": setting, "baseline": baseline, "items": pc.n["items"],
                    "accuracy_baseline": pc.row(quantity=f"accuracy {baseline}")["estimate"],
                    "accuracy": pc.row(quantity=f"accuracy {variant}")["estimate"],
                    "delta": _estimate(pc.row(quantity="difference (CLT)"), "paired difference (CLT)")})
    return out


def long_horizon_from_store(store, baseline: str, variant: str, model: str | None = None,
                            alpha: float = 0.05) -> list[dict[str, Any]]:
    """Per (environment, horizon, setting): the variant's success with a Wilson interval and the paired delta."""
    from qdrift.stats import paired_from_rows

    rows = _only_model(store.rows("episode"), model)
    if not rows:
        return []
    _configs(rows, baseline, variant, "agent episode")
    out = []
    groups = _paired_groups(store, rows, baseline, variant, lambda r: (r.get("env") or r["task"], int(r["horizon"])))
    for (env, horizon), setting, var, base in groups:
        k, n = sum(bool(r["success"]) for r in var), len(var)
        lo, hi = proportion_confint(k, n, alpha=alpha, method="wilson")
        row = {"env": env, "horizon": horizon, "setting": setting, "episodes": n,
               "success": {"estimate": k / n, "ci_low": float(lo), "ci_high": float(hi), "method": "Wilson"}}
        if variant == baseline:
            out.append({**row, "success_baseline": k / n, "delta": dict(_NO_DELTA)})
            continue
        pc = paired_from_rows(var + base, "config", baseline, variant, item_cols=["seed", "trial"],
                              outcome="success", alpha=alpha, n_boot=0)
        out.append({**row, "success_baseline": pc.row(quantity=f"accuracy {baseline}")["estimate"],
                    "delta": _estimate(pc.row(quantity="difference (CLT)"), "paired difference (CLT)")})
    return out
