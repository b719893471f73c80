"""The numbers and pictures of one finished cell, from its tidy rows: what a per-cell log shows.

Agent cells hold episode rows (`success`, `first_error_step`, ...) and step rows (`step`,
`correct`, `json_valid`, ...) and, with `drift: true`, teacher-forced drift rows (`kl`, `top1_agree`,
...); short-form cells hold item rows (`item`, `correct`, and for
lm-eval multiple choice `gold_logprob`). A variant cell is also compared, item by item, with the
baseline cell of the same model and task when that one is done (`qdrift.stats.paired_from_rows`).
No W&B here: these are plain dicts and matplotlib figures, so any sink (or a test) can use them.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

EPISODE_ITEM = ["env", "horizon", "seed", "trial"]


def _mean(values) -> float | None:
    values = [float(v) for v in values if v is not None]
    return sum(values) / len(values) if values else None


def agent_metrics(episodes: list[dict], steps: list[dict]) -> dict[str, Any]:
    """Episode success, per-step accuracy and validity, and the first-error step of failed episodes."""
    errors = [e["first_error_step"] for e in episodes if e.get("first_error_step") is not None]
    out: dict[str, Any] = {
        "episodes": len(episodes),
        "steps": len(steps),
        "success_rate": _mean(bool(e["success"]) for e in episodes),
        "step_accuracy": _mean(bool(s["correct"]) for s in steps),
        "json_valid_rate": _mean(bool(s["json_valid"]) for s in steps if "json_valid" in s),
        "schema_valid_rate": _mean(bool(s["schema_valid"]) for s in steps if "schema_valid" in s),
        "first_error_rate": len(errors) / len(episodes) if episodes else None,
        "first_error_step_mean": _mean(errors),
        "first_error_step_median": float(statistics.median(errors)) if errors else None,
        "tokens_out_mean": _mean(s.get("tokens_out") for s in steps),
    }
    return {k: v for k, v in out.items() if v is not None}


def drift_metrics(drift: list[dict]) -> dict[str, Any]:
    """Teacher-forced drift along the baseline's episodes: mean and p99 KL, flip rate, log-prob drop."""
    import numpy as np

    if not drift:
        return {}
    kl = np.array([float(r["kl"]) for r in drift])
    return {"tokens": len(drift), "mean_kl": float(kl.mean()),
            "kl_p99": float(np.quantile(kl, 0.99, method="inverted_cdf")),
            "flip_rate": _mean(not r["top1_agree"] for r in drift),
            "logprob_drop_mean": _mean(r["base_logprob"] - r["var_logprob"] for r in drift)}


def short_form_metrics(items: list[dict]) -> dict[str, Any]:
    """Item accuracy and, where the runner records them, mean gold log-probability and acc_norm."""
    out: dict[str, Any] = {
        "items": len(items),
        "accuracy": _mean(i["correct"] for i in items),
        "gold_logprob_mean": _mean(i.get("gold_logprob") for i in items),
        "acc_norm": _mean(i.get("acc_norm") for i in items),
    }
    return {k: v for k, v in out.items() if v is not None}


def paired_metrics(result) -> dict[str, Any]:
    """The quoted numbers of a `PairedResult`: difference and interval, McNemar p, flip rate."""
    diff = result.row(quantity="difference (CLT)")
    out = {"diff": diff["estimate"], "diff_ci_low": diff["ci_low"], "diff_ci_high": diff["ci_high"],
           "diff_p": diff["p_value"], "items": result.n["items"],
           "flip_rate": result.n["discordant"] / result.n["items"] if result.n["items"] else None}
    if any(r["quantity"] == "McNemar exact" for r in result.rows):
        out["mcnemar_p"] = result.mcnemar_p
    return {k: v for k, v in out.items() if v is not None}


def paired_with_baseline(kind: str, rows: list[dict], baseline_rows: list[dict], spec: str):
    """`paired_from_rows` of the cell against its baseline cell (episodes: success; items: correct)."""
    from qdrift.stats import paired_from_rows

    both = [{**r, "spec": "baseline"} for r in baseline_rows] + [{**r, "spec": spec} for r in rows]
    if kind == "agent":
        return paired_from_rows(both, "spec", "baseline", spec, item_cols=EPISODE_ITEM, outcome="success")
    return paired_from_rows(both, "spec", "baseline", spec, item_cols=["item"], outcome="correct")


def step_accuracy_figure(steps: list[dict], title: str):
    """Per-step accuracy against the step index, and the share of episodes still error-free."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_step: dict[int, list[bool]] = defaultdict(list)
    for s in steps:
        by_step[int(s["step"])].append(bool(s["correct"]))
    first_wrong: dict[int, int] = {}
    for s in sorted(steps, key=lambda s: int(s["step"])):
        if not s["correct"]:
            first_wrong.setdefault(s["episode"], int(s["step"]))
    episodes = {s["episode"] for s in steps}
    xs = sorted(by_step)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(xs, [sum(by_step[x]) / len(by_step[x]) for x in xs], marker="o", label="step accuracy")
    alive = [sum(1 for e in episodes if first_wrong.get(e, x + 1) > x) / len(episodes) for x in xs]
    ax.step(xs, alive, where="post", label="episodes without an error so far")
    ax.set_xlabel("step index")
    ax.set_ylabel("fraction")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def paired_figure(result):
    """The paired result's forest plot (difference estimates with their intervals)."""
    import matplotlib

    matplotlib.use("Agg")
    ax = result.plot()
    ax.figure.tight_layout()
    return ax.figure
