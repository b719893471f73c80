"""The paper's figures, drawn from the same `ModelResults` its tables come from (PNG, matplotlib)."""

from __future__ import annotations

from pathlib import Path

from qdrift.paper.tables import BASELINE, ModelResults


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _labelled(res: ModelResults, rows: list[dict]) -> list[dict]:
    return [{**r, "config": res.label(r["config"])} for r in rows]


def _save(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    _plt().close(fig)
    return path.name


def success_curves(res: ModelResults, env: str, path: Path) -> str | None:
    """Success rate vs horizon per config, Wilson bands (qdrift.stats.success_by_horizon)."""
    from qdrift import stats

    rows = res.episodes.get(env)
    if not rows or len(res.horizons(env)) < 2:
        return None
    ax = stats.success_by_horizon(_labelled(res, rows), "config").plot()
    ax.set_title(f"{res.model}: {env}")
    return _save(ax.figure, path)


def survival_curves(res: ModelResults, env: str, horizon: int, path: Path) -> str | None:
    """Kaplan-Meier curves of the first-error step at one horizon (qdrift.stats.kaplan_meier)."""
    from qdrift import stats

    rows = [r for r in res.episodes.get(env, []) if int(r["horizon"]) == horizon]
    if not rows:
        return None
    try:
        ax = stats.kaplan_meier(_labelled(res, rows), "config").plot()
    except (ValueError, ArithmeticError):
        return None
    ax.set_title(f"{res.model}: {env}, L = {horizon}")
    return _save(ax.figure, path)


def step_error_forest(results: list[tuple[ModelResults, str]], path: Path) -> str | None:
    """Per-step error-rate ratio to baseline with 95% intervals, one panel per (model, environment)."""
    panels = [(r, env, r.step_error(env)[0]) for r, env in results]
    panels = [p for p in panels if p[2] is not None]
    if not panels:
        return None
    plt = _plt()
    from matplotlib.ticker import LogLocator, NullFormatter

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (res, env, ratio) in zip(axes[0], panels, strict=True):
        rows = [r for r in ratio.rows if r["quantity"] == "p_step ratio"]
        names = [res.label(r["variant"]) for r in rows]
        for i, r in enumerate(rows):
            est, (lo, hi) = r["estimate"], r["ci"]
            if est == est and est > 0:  # not NaN; a ratio of 0 cannot sit on a log axis
                ax.plot([max(lo, 1e-3), min(hi, 1e3)], [i, i], color="C0")
                ax.plot([est], [i], "o", color="C0")
            else:
                ax.text(1, i, "no errors in either" if est != est else "0 errors", va="center", fontsize=8)
        ax.axvline(1, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_minor_formatter(NullFormatter())  # unlabelled minor ticks: short ranges overprint
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.set_xlabel("per-step error rate / baseline's")
        ax.set_title(f"{res.model}: {env}", fontsize=9)
    return _save(fig, path)


def _scatter(ax, points: dict[str, tuple[float, float]]) -> None:
    """One marker per point, configs that land on the same point named together."""
    at: dict[tuple[float, float], list[str]] = {}
    for name, xy in points.items():
        at.setdefault((round(xy[0], 9), round(xy[1], 9)), []).append(name)
    for (x, y), names in at.items():
        ax.plot([x], [y], "o")
        ax.annotate(", ".join(names), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)


def _contrast(res: ModelResults, task: str, change, xlabel: str, ylabel: str, path: Path) -> str:
    """Each variant's short-form accuracy change (x) against `change(variant)` (y; NaN skips it)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 4))
    acc0, _ = res.accuracy(task, BASELINE)
    points = {}
    for v in res.variants():
        acc, n = res.accuracy(task, v)
        y = change(v)
        if n and y == y:
            points[res.label(v)] = (acc - acc0, y)
    _scatter(ax, points)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(res.model)
    return _save(fig, path)


def contrast(res: ModelResults, task: str, env: str, horizon: int, path: Path) -> str | None:
    """Each variant's short-form accuracy change against its change in success at a long horizon."""
    if task not in res.items or env not in res.episodes:
        return None
    s0 = res.success_rate(env, BASELINE, horizon)
    return _contrast(res, task, lambda v: res.success_rate(env, v, horizon) - s0,
                     f"short-form accuracy change ({task})", f"success change, {env} L = {horizon}", path)


def tool_contrast(res: ModelResults, task: str, env: str, path: Path) -> str | None:
    """Each variant's short-form accuracy change against its change in the share of schema-valid calls."""
    if task not in res.items or env not in res.steps:
        return None
    v0 = res.validity(env, BASELINE)["schema_valid"]
    return _contrast(res, task, lambda v: res.validity(env, v)["schema_valid"] - v0,
                     f"short-form accuracy change ({task})", f"change in schema-valid calls, {env}", path)


def drift_profiles(res: ModelResults, env: str, horizon: int, path: Path) -> str | None:
    """Mean teacher-forced KL per step along the baseline's episodes at one horizon, per variant (log scale);
    steps are pooled in twenty bins so a line is not one token's noise."""
    variants = res.drift_variants(env)
    if not variants:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    width = max(1, (horizon + 1) // 20)
    for v in variants:
        sums: dict[int, list[float]] = {}
        for r in res.drift.get(env, []):
            if r["config"] == v and int(r["horizon"]) == horizon:
                sums.setdefault(int(r["step"]) // width, []).append(float(r["kl"]))
        xs = sorted(sums)
        ys = [sum(sums[x]) / len(sums[x]) for x in xs]
        keep = [(x * width + (width - 1) / 2, y) for x, y in zip(xs, ys, strict=True) if y > 0]
        if keep:
            ax.plot(*zip(*keep, strict=True), marker=".", label=res.label(v))
    ax.set_yscale("log")
    ax.set_xlabel("agent step")
    ax.set_ylabel("mean KL(baseline || variant), nats")
    ax.set_title(f"{res.model}: {env}, L = {horizon}, teacher-forced", fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)
