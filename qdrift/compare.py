"""A markdown report from a results store: every variant against the baseline, with plots.

Per (model, agent environment): a table of the cells (episodes, success, per-step accuracy),
success by horizon, the per-step error-rate ratio, and per variant the paired comparison and,
with two or more horizons, the compounding test, and where the cells recorded teacher-forced drift
(`drift: true`), its summary and its growth along the trajectory; the success curves, the
Kaplan-Meier curves of the first-error step and the drift profiles are saved as PNGs next to the
report. Per (model, short-form task): the
accuracy per configuration and the paired comparison on items. An analysis that cannot be
computed (too few rows, a missing baseline) is reported with its reason instead of stopping
the report.

A store can hold several done cells of the same (model, spec, task, horizon): a sweep whose
configuration changed (a new option, another qdrift version) writes new cells beside the old ones.
Their rows must not be counted twice, so the report takes, of cells over overlapping seeds (or
short-form cells of one task), only the last finished and names the ones it left out; cells over
disjoint seeds are pooled. `sweep run --report` reports exactly the sweep's cells.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from qdrift.store import Store, canonical_json

# What makes two cells of one (model, spec, task, horizon) different measurements, shared by a baseline
# and its variants: paired only within one setting. The code (qdrift's version, a path environment's
# file) is part of it, so a baseline rerun on edited code is never paired with variants of the old.
# Everything in a cell's configuration (qdrift.sweep.cells.Cell.config) is its setting (knobs, prompt,
# dtype, device, qdrift version, a path environment's or the shared data's sha256, ...) except what
# names the cell: the model, the spec (under three names), what ran and its seeds (cells over disjoint
# seeds of one setting are pooled). Listing what is left out, not what is kept, makes a new key part
# of the setting without a second edit here.
NOT_SETTING = ("model", "config", "spec", "spec_hash", "kind", "task", "horizon", "seeds")
# Set on a quantized spec's cells only: its baseline's setting lacks them, so pairing leaves them out.
VARIANT_ONLY = ("calibration", "batch", "drift")


def setting(config: dict, leave_out: tuple[str, ...] = ()) -> dict:
    """The part of a cell's configuration that makes two cells of one spec, task and horizon different
    measurements (never pooled, never paired); `leave_out` drops more keys (VARIANT_ONLY, to pair)."""
    return {k: v for k, v in config.items() if k not in NOT_SETTING + leave_out}


def _setting(cfg: dict) -> str:
    return canonical_json(setting(cfg, VARIANT_ONLY))

ITEM_COLS = ["env", "horizon", "seed", "trial"]


def _block(text: str) -> list[str]:
    return ["```", text.rstrip(), "```", ""]


def _try(lines: list[str], title: str, fn) -> object | None:
    """Append `fn()`'s summary under `title`, or the reason it could not be computed."""
    lines.append(f"### {title}")
    lines.append("")
    try:
        result = fn()
    except (ValueError, KeyError, ZeroDivisionError, ArithmeticError) as e:
        lines += [f"Not computed: {e}", ""]
        return None
    lines += _block(result.summary())
    return result


def _slug(*parts: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(parts)).strip("_")


def _save(result, path: Path) -> str | None:
    """Save `result.plot()` as a PNG; the file name, or None when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if result is None:
        return None
    try:
        ax = result.plot()
    except NotImplementedError:
        return None
    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=110)
    plt.close(ax.figure)
    return path.name


def _cell_table(episodes: list[dict], steps: list[dict]) -> list[str]:
    acc: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for s in steps:
        a = acc[(s["config"], s["horizon"])]
        a[0] += bool(s["correct"])
        a[1] += 1
    cells: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for e in episodes:
        c = cells[(e["config"], e["horizon"])]
        c[0] += bool(e["success"])
        c[1] += 1
    lines = ["| config | horizon | episodes | success | step accuracy |", "|---|---|---|---|---|"]
    for (config, h), (succ, n) in cells.items():
        right, total = acc.get((config, h), (0, 0))
        step_acc = f"{right / total:.4f}" if total else "-"
        lines.append(f"| `{config}` | {h} | {n} | {succ / n:.3f} | {step_acc} |")
    return lines + [""]


def _agent_section(model: str, env: str, episodes: list[dict], steps: list[dict], baseline: str,
                   out_dir: Path, stem: str, drift: list[dict] = ()) -> list[str]:
    from qdrift import stats

    lines = [f"## {model} on {env}", ""] + _cell_table(episodes, steps)
    configs = list(dict.fromkeys(r["config"] for r in episodes))
    if baseline not in configs:
        return lines + [f"No baseline: no rows with config '{baseline}' (configs here: {', '.join(configs)}).", ""]
    curves = _try(lines, "Success by horizon", lambda: stats.success_by_horizon(episodes, "config"))
    for kind, result in (("success", curves), ("first-error", _km(episodes))):
        name = _save(result, out_dir / f"{stem}-{_slug(model, env, kind)}.png")
        if name:
            lines += [f"![{kind} {model} {env}]({name})", ""]
    _try(lines, "Per-step error rate vs baseline",
         lambda: stats.step_error_ratio(episodes, "config", baseline=baseline))
    horizons = {r["horizon"] for r in episodes}
    for variant in (c for c in configs if c != baseline):
        _try(lines, f"`{variant}` vs `{baseline}`: paired comparison",
             lambda v=variant: stats.paired_from_rows(episodes, "config", baseline, v, item_cols=ITEM_COLS,
                                                      cluster_col="seed"))
        if len(horizons) >= 2:
            _try(lines, f"`{variant}` vs `{baseline}`: compounding",
                 lambda v=variant: stats.compounding_test(episodes, "config", baseline, v))
        own = [r for r in drift if r["config"] == variant]
        if own:
            lines += _drift_lines(model, env, variant, baseline, own, out_dir, stem)
    return lines


def _drift_lines(model: str, env: str, variant: str, baseline: str, rows: list[dict], out_dir: Path,
                 stem: str) -> list[str]:
    from qdrift import stats

    # One cluster per episode: a seed at one horizon (the replay's own ids restart in every cell).
    rows = [{**r, "episode": f"{r['horizon']}/{r['seed']}"} for r in rows]
    lines: list[str] = []
    summary = _try(lines, f"`{variant}` vs `{baseline}`: teacher-forced drift (baseline's episodes)",
                   lambda: stats.divergence_summary(rows))
    name = _save(summary, out_dir / f"{stem}-{_slug(model, env, variant, 'drift')}.png")
    if name:
        lines += [f"![drift {model} {env} {variant}]({name})", ""]
    _try(lines, f"`{variant}`: drift along the trajectory", lambda: stats.drift_trend(rows))
    return lines


def _km(episodes):
    from qdrift import stats

    try:
        return stats.kaplan_meier(episodes, "config")
    except (ValueError, ArithmeticError):
        return None


def _short_form_section(model: str, task: str, items: list[dict], baseline: str) -> list[str]:
    from qdrift import stats

    lines = [f"## {model} on {task} (short form)", "", "| config | items | accuracy |", "|---|---|---|"]
    by: dict[str, list[float]] = defaultdict(list)
    unscored: dict[str, int] = defaultdict(int)
    for r in items:
        if r["correct"] is None:  # a task whose metric qdrift does not recognise scores no item
            unscored[r["config"]] += 1
        else:
            by[r["config"]].append(float(r["correct"]))
    lines += [f"| `{c}` | {len(v)} | {sum(v) / len(v):.4f} |" for c, v in by.items()] + [""]
    if unscored:
        lines += ["Items without a score (no recognised metric), left out: "
                  + ", ".join(f"`{c}` {n}" for c, n in sorted(unscored.items())), ""]
    items = [r for r in items if r["correct"] is not None]
    if not items:
        return lines
    for variant in (c for c in by if c != baseline):
        if {"doc_id", "answer"} <= items[0].keys():  # lm-eval rows: accuracy, flips, KL, gold log-prob
            from qdrift.lmeval.compare import compare_short_form

            # Paired on lm-eval's own (sub)task of each item (`row_task`: a group task's cell runs several),
            # labelled by the cell's spec (the store's `spec` column: "baseline", not the spec lm-eval ran).
            def own(config):
                return [{**r, "task": r.get("row_task", r["task"])} for r in items if r["config"] == config]

            _try(lines, f"`{variant}` vs `{baseline}`: paired accuracy, flip rate, KL and gold log-prob",
                 lambda v=variant: compare_short_form(own(baseline), own(v)))
        else:
            _try(lines, f"`{variant}` vs `{baseline}`: paired comparison",
                 lambda v=variant: stats.paired_from_rows(items, "config", baseline, v, item_cols=["item"],
                                                          outcome="correct"))
    return lines


def _label(cell: dict) -> str:
    cfg = cell["config"]
    return f"{cfg.get('model')} `{cfg.get('spec')}` {cfg.get('task')} L={cfg.get('horizon')}"


def reported_cells(cells: list[dict]) -> tuple[list[dict], list[dict]]:
    """(cells to report, cells superseded): of done cells of one (model, spec, kind, task, horizon,
    setting), the last finished wins over older ones whose seeds overlap its (short-form cells always
    overlap). Cells of another setting (knobs, prompt, max_new_tokens, runner, limit, options, dtype)
    are another measurement: kept, and reported apart."""
    slots: dict[tuple, list[dict]] = defaultdict(list)
    for c in cells:
        cfg = c["config"]
        slots[(cfg.get("model"), cfg.get("spec"), cfg.get("kind"), cfg.get("task"), cfg.get("horizon"),
               _setting(cfg))].append(c)
    kept, superseded = [], []
    for group in slots.values():
        taken: list[set | None] = []  # seeds of the cells kept so far; None: not a seed list (overlaps all)
        for c in sorted(group, key=lambda c: (c["finished"] or 0, c["created"] or 0), reverse=True):
            seeds = c["config"].get("seeds")
            seeds = set(seeds) if isinstance(seeds, list) else None
            if any(t is None or seeds is None or t & seeds for t in taken):
                superseded.append(c)
            else:
                kept.append(c)
                taken.append(seeds)
    return kept, superseded


def _check_baseline(baseline: str, cells: list[dict], store: Store) -> None:
    """Refuse a baseline no done cell has: a typo would otherwise give a report of "no baseline" notes."""
    configs = sorted({c["config"].get("config") for c in cells if c["status"] == "done"} - {None})
    if configs and baseline not in configs:
        raise ValueError(f"no done cell has config {baseline!r} (the baseline asked for); configs in "
                         f"{store.path}: {', '.join(configs)}")


def build_report(store: Store, baseline: str | None = None, out: str | Path = "report.md",
                 keys: set[str] | None = None) -> Path:
    """Write the markdown report for the done cells in `store` (only `keys`, when given) to `out`
    (plots beside it). A `baseline` named but in no done cell is refused; the default, "baseline",
    is not, so a store of variants only still gets its report."""
    cells = [c for c in store.cells() if keys is None or c["key"] in keys]
    if baseline is None:
        baseline = "baseline"
    else:
        _check_baseline(baseline, cells, store)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    failed = [c for c in cells if c["status"] == "failed"]
    done, superseded = reported_cells([c for c in cells if c["status"] == "done"])
    lines = [f"# qdrift comparison: {store.path.name}", "",
             f"{len(done)} done cells, {len(failed)} failed; baseline `{baseline}`.", ""]
    for c in failed:
        lines.append(f"- failed: {_label(c)}: {(c['error'] or '').splitlines()[0] if c['error'] else ''}")
    if superseded:
        lines.append(f"- left out, superseded by a later cell of the same model, spec, task, horizon and setting "
                     f"over the same seeds: {'; '.join(_label(c) + ' (' + c['key'] + ')' for c in superseded)}")
    lines.append("")
    keep = [c["key"] for c in done]
    setting_of = {c["key"]: _setting(c["config"]) for c in done}

    def rows(kind):
        return _group(store.rows(kind, keys=keep), setting_of)

    episodes, steps, drift = rows("episode"), rows("step"), rows("drift")
    for (model, env, setting), eps in episodes.items():
        title = env + _setting_label(setting, episodes, model, env)
        lines += _agent_section(model, title, eps, steps.get((model, env, setting), []), baseline, out.parent,
                                out.stem, drift.get((model, env, setting), []))
    items = rows("item")
    for (model, task, setting), rows in items.items():
        lines += _short_form_section(model, task + _setting_label(setting, items, model, task), rows, baseline)
    if not episodes and not items:
        lines += ["No done cells in this store yet.", ""]
    out.write_text("\n".join(lines))
    return out


def _setting_label(setting: str, groups: dict, model: str, task: str) -> str:
    """Nothing when (model, task) was measured in one setting; else the setting, to tell sections apart."""
    if sum(1 for m, t, _ in groups if (m, t) == (model, task)) < 2:
        return ""
    return f" [{setting}]"


def _group(rows: list[dict], setting_of: dict[str, str]) -> dict[tuple[str, str, str], list[dict]]:
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["model"], r["task"], setting_of[r["cell"]])].append(r)
    for group in groups.values():  # by config and horizon: no table or section follows the order cells finished
        group.sort(key=lambda r: (str(r["config"]), r.get("horizon") or 0))
    return dict(groups)
