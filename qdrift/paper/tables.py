"""The paper's numbers, computed from a results store: one `ModelResults` per (store, model).

Every table and every number the paper quotes comes from here (or from `qdrift.stats.power` and
`qdrift.capacity`, which compute rather than measure), so the text is regenerated, never typed.
An analysis that cannot be computed (too few rows, no baseline) yields its reason, which the
paper prints in place of the number.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

BASELINE = "baseline"
KL_SLOPE = "KL slope (nats per 100 steps)"  # the drift-trend row every slope here is read from
ITEM_COLS = ["env", "horizon", "seed", "trial"]


def fmt(x: Any, digits: int = 3) -> str:
    """A number for a table: '–' for missing or NaN, fixed digits, tiny p-values in e-notation."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and x != 0 and abs(x) < 10 ** -digits:
        return f"{x:.1e}"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def coef(x: Any, digits: int = 3) -> str:
    """A model coefficient: fixed digits only (a 1e-15 is a zero, not a small p-value)."""
    x = float(x)
    if math.isnan(x):
        return "–"
    return f"{0.0 if round(x, digits) == 0 else x:.{digits}f}"


def sci(x: Any) -> str:
    """A small positive quantity spanning decades (a KL in nats): three significant digits, e-notation."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{float(x):.2e}"


def ci(pair, digits: int = 3) -> str:
    lo, hi = pair
    return f"[{fmt(float(lo), digits)}, {fmt(float(hi), digits)}]"


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def sci_ci(row: dict) -> str:
    """An estimate with its interval, in scientific notation: `1.2e-05 [8.3e-06, 1.6e-05]`."""
    return f"{sci(row['estimate'])} [{sci(row['ci_low'])}, {sci(row['ci_high'])}]"


def horizon_table(first: str, names: list[tuple[str, str]], horizons: list[int], cell) -> str:
    """A table of one row per (key, label) in `names` and one column per horizon, cell(key, h) in each."""
    return md_table([first] + [f"L = {h}" for h in horizons],
                    [[label] + [cell(key, h) for h in horizons] for key, label in names])


@dataclass
class ModelResults:
    """One model's rows from a store, and the analyses the paper reports on them."""

    model: str
    labels: dict[str, str]  # canonical spec -> short label
    episodes: dict[str, list[dict]] = field(default_factory=dict)  # env -> episode rows
    steps: dict[str, list[dict]] = field(default_factory=dict)  # env -> step rows
    items: dict[str, list[dict]] = field(default_factory=dict)  # short-form task -> item rows
    drift: dict[str, list[dict]] = field(default_factory=dict)  # env -> teacher-forced drift rows
    wall_s: float = 0.0
    cells: int = 0
    failed: list[str] = field(default_factory=list)
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_store(cls, store, model: str, labels: dict[str, str], keys: set[str]) -> ModelResults:
        """`model`'s rows among the cells `keys` (the sweep's current cells: a store may hold others)."""
        out = cls(model, labels)
        done = []
        for c in store.cells():
            if c["key"] not in keys or c["config"].get("model") != model:
                continue
            if c["status"] == "done":
                out.cells += 1
                out.wall_s += c.get("wall_s") or 0.0
                done.append(c["key"])
            else:
                cfg = c["config"]
                out.failed.append(f"{cfg.get('spec')} {cfg.get('task')} L={cfg.get('horizon')}")
        for kind, target in (("episode", out.episodes), ("step", out.steps), ("item", out.items),
                             ("drift", out.drift)):
            groups = defaultdict(list)
            for r in store.rows(kind, keys=done):
                if r["model"] == model:
                    # lm-eval's own (sub)task of an item (`row_task`; the store's `task` is the cell's): a
                    # group task's cell runs several, each paired and tabled on its own
                    task = r.get("row_task", r["task"])
                    groups[task].append({**r, "task": task})
            target.update(groups)
        return out

    def merge(self, other: ModelResults, sweeps: str) -> None:
        """Add `other`'s rows (the same model in another sweep). A task both hold would pool cells run
        under two sweeps' settings into one table, so it is refused."""
        for name in ("episodes", "steps", "items", "drift"):
            mine, theirs = getattr(self, name), getattr(other, name)
            both = sorted(set(mine) & set(theirs))
            if both:
                raise ValueError(f"model {self.model!r} has {name} rows for {', '.join(both)} in two sweeps "
                                 f"({sweeps}): the paper reads each task of a model from one sweep")
            mine.update(theirs)
        self.cells += other.cells
        self.wall_s += other.wall_s
        self.failed += other.failed
        self._cache.clear()

    # ------------------------------------------------------------------ names

    def label(self, config: str) -> str:
        return self.labels.get(config, config)

    def configs(self, env: str | None = None) -> list[str]:
        rows = self.episodes.get(env, []) if env else [r for v in (*self.episodes.values(), *self.items.values())
                                                        for r in v]
        present = set(r["config"] for r in rows)
        ordered = [c for c in self.labels if c in present]
        return ordered + sorted(present - set(ordered))

    def variants(self, env: str | None = None) -> list[str]:
        return [c for c in self.configs(env) if c != BASELINE]

    def horizons(self, env: str) -> list[int]:
        return sorted({int(r["horizon"]) for r in self.episodes.get(env, [])})

    # ------------------------------------------------------------------ agent numbers

    def success(self, env: str, config: str, horizon: int) -> tuple[int, int]:
        rows = [r for r in self.episodes.get(env, []) if r["config"] == config and int(r["horizon"]) == horizon]
        return sum(bool(r["success"]) for r in rows), len(rows)

    def failed_at_answer(self, env: str) -> tuple[int, int]:
        """(failed episodes whose first wrong call was the answer, failed episodes), over every config.

        The answer is step L (0-based) in environments of L steps and one final call (pointer chasing,
        the ledger)."""
        failed = [r for r in self.episodes.get(env, []) if not r["success"]]
        last = sum(r.get("first_error_step") is not None and int(r["first_error_step"]) == int(r["horizon"])
                   for r in failed)
        return last, len(failed)

    def success_rate(self, env: str, config: str, horizon: int) -> float:
        k, n = self.success(env, config, horizon)
        return k / n if n else float("nan")

    def step_accuracy(self, env: str, config: str, horizon: int | None = None) -> tuple[int, int]:
        rows = [r for r in self.steps.get(env, []) if r["config"] == config
                and (horizon is None or int(r["horizon"]) == horizon)]
        return sum(bool(r["correct"]) for r in rows), len(rows)

    def _memo(self, key, fn):
        if key not in self._cache:
            try:
                self._cache[key] = (fn(), None)
            except (ValueError, KeyError, ZeroDivisionError, ArithmeticError) as e:
                self._cache[key] = (None, str(e))
        return self._cache[key]

    def step_error(self, env: str):
        from qdrift import stats

        if not self.episodes.get(env):
            return None, f"no {env} episodes of {self.model} in the store yet"
        return self._memo(("ratio", env), lambda: stats.step_error_ratio(self.episodes[env], "config",
                                                                         baseline=BASELINE))

    def compounding(self, env: str, variant: str):
        from qdrift import stats

        if not self.episodes.get(env):
            return None, f"no {env} episodes of {self.model} in the store yet"
        return self._memo(("comp", env, variant), lambda: stats.compounding_test(self.episodes[env], "config",
                                                                                 BASELINE, variant))

    def paired_at(self, env: str, variant: str, horizon: int):
        from qdrift import stats

        rows = [r for r in self.episodes.get(env, []) if int(r["horizon"]) == horizon]
        return self._memo(("paired", env, variant, horizon),
                          lambda: stats.paired_from_rows(rows, "config", BASELINE, variant, item_cols=ITEM_COLS,
                                                         cluster_col="seed"))

    def interaction(self, env: str, variant: str) -> dict:
        """The variant x horizon term of the compounding test: coef, CI, one-sided p (or the reason)."""
        res, err = self.compounding(env, variant)
        if res is None:
            return {"error": err}
        row = res.row(term="variant:h")
        return {**row, "firth": res.extra["firth"], "identical": res.extra["identical"]}

    def significant_compounding(self, env: str, alpha: float = 0.05) -> list[str]:
        return [v for v in self.variants(env) if _below(self.interaction(env, v).get("p_value"), alpha)]

    def success_table(self, env: str) -> str:
        return horizon_table("config", [(c, self.label(c)) for c in self.configs(env)], self.horizons(env),
                             lambda c, h: self._frac(*self.success(env, c, h)))

    def step_accuracy_table(self, env: str) -> str:
        def accuracy(c, h):
            k, n = self.step_accuracy(env, c, h)
            return fmt(k / n, 4) if n else "–"

        return horizon_table("config", [(c, self.label(c)) for c in self.configs(env)], self.horizons(env), accuracy)

    def step_error_table(self, env: str) -> str:
        res, err = self.step_error(env)
        if res is None:
            return f"Not computed: {err}"
        rates = {r["config"]: r for r in res.rows if r["quantity"] == "p_step"}
        ratios = {r["variant"]: r for r in res.rows if r["quantity"] == "p_step ratio"}
        rows = []
        for c in self.configs(env):
            p = rates[c]
            rt = ratios.get(c)
            rows.append([self.label(c), p["errors"], p["steps_at_risk"], fmt(p["estimate"], 5), ci(p["ci"], 5),
                         fmt(rt["estimate"], 2) if rt else "1 (reference)", ci(rt["ci"], 2) if rt else ""])
        return md_table(["config", "first errors", "steps at risk", "per-step error rate", "95% CI",
                         "ratio to baseline", "95% CI"], rows)

    def compounding_table(self, env: str) -> str:
        rows = []
        for v in self.variants(env):
            it = self.interaction(env, v)
            if "error" in it:
                rows.append([self.label(v), "–", "–", "–", f"not computed: {it['error']}"])
                continue
            rows.append([self.label(v), coef(it["coef"]), ci(it["ci"], 2), fmt(it["p_value"], 3),
                         fit_kind(it)])
        return md_table(["variant", "variant x log L", "95% CI", "p (one-sided, deficit grows)", "fit"], rows)

    def validity(self, env: str, config: str) -> dict[str, float]:
        """Shares of scored steps with valid JSON, a schema-valid call and the oracle's call."""
        st = [r for r in self.steps.get(env, []) if r["config"] == config]
        return {k: (sum(bool(r[k]) for r in st) / len(st) if st else float("nan"))
                for k in ("json_valid", "schema_valid", "correct")}

    def short_form_blind(self, task: str, env: str, margin: float = 0.01, drop: float = 0.2) -> list[dict]:
        """Variants that pass a provider's "within `margin`" check on short-form accuracy (the point
        estimate) while their share of schema-valid tool calls on `env` falls by at least `drop`.

        Each carries the difference's 95% interval and whether it lies inside ±margin (`equivalent`):
        a point estimate within the margin is what such claims rest on, not evidence of equivalence,
        and the paper says which one it has. KV-only specs are left out: a loglikelihood-scored task
        runs without a cache, so they cannot move it."""
        base_acc, v0 = self.accuracy(task, BASELINE)[0], self.validity(env, BASELINE)
        out = []
        for v in self.variants():
            acc, n = self.accuracy(task, v)
            vv = self.validity(env, v)
            if not n or kv_only(v) or math.isnan(vv["schema_valid"]):
                continue
            if abs(acc - base_acc) <= margin + 1e-12 and v0["schema_valid"] - vv["schema_valid"] >= drop:
                lo, hi = self.accuracy_difference_ci(task, v)
                out.append({"config": v, "diff": acc - base_acc, "ci": (lo, hi), "reach": max(abs(lo), abs(hi)), "n": n,
                            "equivalent": -margin < lo and hi < margin, "base": v0, "variant": vv,
                            "drop": v0["schema_valid"] - vv["schema_valid"]})
        return out

    def accuracy_difference_ci(self, task: str, variant: str) -> tuple[float, float]:
        """The 95% interval of the paired accuracy difference (variant - baseline); nan where not computed."""
        res, _ = self.short_form(task, variant)
        d = _quantity(res, *DIFFERENCE) if res is not None else None
        return (d["ci_low"], d["ci_high"]) if d else (math.nan, math.nan)

    def validity_table(self, env: str) -> str:
        """Over all scored steps per config: calls that parse as JSON, that validate against the tool's
        schema, and that the oracle accepts (what a tool-call validity figure counts)."""
        rows = []
        for c in self.configs(env):
            v = self.validity(env, c)
            rows.append([self.label(c), self.step_accuracy(env, c)[1]] + [fmt(x) for x in v.values()])
        return md_table(["config", "steps", "valid JSON", "schema-valid", "correct"], rows)

    def raised_step_error(self, env: str) -> list[tuple[str, float, tuple[float, float]]]:
        """Variants whose per-step error-rate ratio to the baseline has a 95% interval above 1."""
        res, _ = self.step_error(env)
        if res is None:
            return []
        return [(r["variant"], r["estimate"], r["ci"]) for r in res.rows
                if r["quantity"] == "p_step ratio" and r["ci"][0] > 1]

    # ------------------------------------------------------------------ teacher-forced drift

    def drift_rows(self, env: str, variant: str) -> list[dict]:
        """The variant's drift rows, each episode named by (horizon, seed): the replay's own ids restart per cell."""
        return [{**r, "episode": f"{r['horizon']}/{r['seed']}"} for r in self.drift.get(env, [])
                if r["config"] == variant]

    def drift_variants(self, env: str) -> list[str]:
        present = {r["config"] for r in self.drift.get(env, [])}
        return [v for v in self.variants(env) if v in present]

    def drift_summary(self, env: str, variant: str):
        from qdrift import stats

        return self._memo(("drift", env, variant), lambda: stats.divergence_summary(self.drift_rows(env, variant)))

    def drift_trend(self, env: str, variant: str):
        from qdrift import stats

        return self._memo(("trend", env, variant), lambda: stats.drift_trend(self.drift_rows(env, variant)))

    def drift_ends(self, env: str, variant: str, horizon: int, key: str = "kl") -> tuple[float, float]:
        """Mean of `key` over the first and the last tenth of the steps of the episodes at `horizon`."""
        rows = [r for r in self.drift.get(env, []) if r["config"] == variant and int(r["horizon"]) == horizon]
        cut = max(1, round(0.1 * (horizon + 1)))
        early = [float(r[key]) for r in rows if int(r["step"]) < cut]
        late = [float(r[key]) for r in rows if int(r["step"]) > horizon - cut]
        return (sum(early) / len(early) if early else float("nan")), (sum(late) / len(late) if late else float("nan"))

    def drift_horizons(self, env: str) -> list[int]:
        """The horizons whose episodes have a trajectory to slope along (L > 1)."""
        return [h for h in self.horizons(env) if h > 1]

    def drift_trend_at(self, env: str, variant: str, horizon: int):
        """The KL slope within the episodes of one horizon only."""
        from qdrift import stats

        rows = [r for r in self.drift_rows(env, variant) if int(r["horizon"]) == horizon]
        return self._memo(("trend", env, variant, horizon), lambda: stats.drift_trend(rows))

    def drift_growth(self, env: str) -> dict[str, tuple[float, float]]:
        """Variant -> (one-sided p that its KL grows with the step, pooled over horizons; the same
        Holm-adjusted over every variant tested), for the variants whose slope was computed."""
        from qdrift import stats

        ps = {}
        for v in self.drift_variants(env):
            res, _ = self.drift_trend(env, v)
            p = res.row(quantity=KL_SLOPE)["p_growth"] if res is not None else None
            if p is not None:
                ps[v] = p
        if not ps:
            return {}
        return {r["name"]: (r["p_raw"], r["p_adjusted"]) for r in stats.adjust(ps, "holm").rows}

    def growing_drift(self, env: str, alpha: float = 0.05, adjusted: bool = True) -> list[str]:
        """Variants whose teacher-forced KL grows along the trajectory at one-sided p < alpha, by
        default after Holm's adjustment over the variants tested (one test each)."""
        growth = self.drift_growth(env)
        return [v for v in self.drift_variants(env) if v in growth and _below(growth[v][1 if adjusted else 0], alpha)]

    def drift_directions(self, env: str, variants: list[str], alpha: float = 0.05) -> tuple[dict, dict]:
        """({horizon: variants whose KL grows within that horizon's episodes}, {horizon: variants whose
        KL declines there}), each one-sided at alpha, unadjusted: where a pooled slope comes from.
        Horizons above 1 only, as in `drift_by_horizon_table`: an L = 1 episode is one call and the
        answer, no trajectory to grow along."""
        grows, declines = defaultdict(list), defaultdict(list)
        for h in self.drift_horizons(env):
            for v in variants:
                res, _ = self.drift_trend_at(env, v, h)
                row = res.row(quantity=KL_SLOPE) if res is not None else {}
                p = row.get("p_growth")
                if _below(p, alpha):
                    grows[h].append(v)
                elif p is not None and _below(1 - p, alpha):
                    declines[h].append(v)
        return dict(grows), dict(declines)

    def drift_by_horizon_table(self, env: str) -> str:
        """The KL slope within the episodes of each horizon, per variant: slope [95% CI], one-sided p (grows)."""
        def slope(v, h):
            res, err = self.drift_trend_at(env, v, h)
            if res is None:
                return f"not computed: {err}"
            t = res.row(quantity=KL_SLOPE)
            return "–" if t["p_growth"] is None else f"{sci_ci(t)}, p = {fmt(t['p_growth'])}"

        return horizon_table("variant", [(v, self.label(v)) for v in self.drift_variants(env)],
                             self.drift_horizons(env), slope)

    def drift_table(self, env: str, horizon: int) -> str:
        growth = self.drift_growth(env)
        rows = []
        for v in self.drift_variants(env):
            summary, err = self.drift_summary(env, v)
            trend, terr = self.drift_trend(env, v)
            if summary is None:
                rows.append([self.label(v), "–", f"not computed: {err}", "", "", "", "", "", ""])
                continue
            kl = summary.row(quantity="mean KL")
            flips = sum(not r["top1_agree"] for r in self.drift.get(env, []) if r["config"] == v)
            early, late = self.drift_ends(env, v, horizon)
            held = growth.get(v)
            if trend is None:
                slope, p, p_holm = f"not computed: {terr}", "–", "–"
            else:
                t = trend.row(quantity=KL_SLOPE)
                slope, p = sci_ci(t), fmt(t["p_growth"])
                p_holm = fmt(held[1]) if held else "–"
            rows.append([self.label(v), f"{summary.n['tokens']:,}",
                         sci_ci(kl), flips, sci(early),
                         sci(late), slope, p, p_holm])
        return md_table(["variant", "tokens", "mean KL [95% CI]", "top-1 flips", f"mean KL, first tenth (L = {horizon})",
                         f"last tenth (L = {horizon})", "KL slope per 100 steps [95% CI]", "p (one-sided, grows)",
                         "p, Holm over the variants"], rows)

    @staticmethod
    def _frac(k: int, n: int) -> str:
        return f"{k}/{n}" if n else "–"

    # ------------------------------------------------------------------ short-form numbers

    def short_form(self, task: str, variant: str):
        rows = self.items.get(task, [])
        base = [r for r in rows if r["config"] == BASELINE]
        var = [r for r in rows if r["config"] == variant]

        def run():
            if {"doc_id", "answer"} <= set(rows[0]):
                from qdrift.lmeval.compare import compare_short_form

                return compare_short_form(base, var)
            from qdrift import stats

            return stats.paired_from_rows(rows, "config", BASELINE, variant, item_cols=["item"], outcome="correct")

        return self._memo(("short", task, variant), run)

    def accuracy(self, task: str, config: str) -> tuple[float, int]:
        vals = [float(r["correct"]) for r in self.items.get(task, []) if r["config"] == config]
        return (sum(vals) / len(vals) if vals else float("nan")), len(vals)

    def short_form_table(self, task: str) -> str:
        rows = []
        acc0, n = self.accuracy(task, BASELINE)
        rows.append([self.label(BASELINE), n, fmt(acc0), "", "", "", ""])
        for v in self.variants():
            if not any(r["config"] == v for r in self.items.get(task, [])):
                continue
            acc, nv = self.accuracy(task, v)
            res, err = self.short_form(task, v)
            if res is None:
                rows.append([self.label(v), nv, fmt(acc), f"not computed: {err}", "", "", ""])
                continue
            diff, p, flips, kl = _short_numbers(res)
            rows.append([self.label(v), nv, fmt(acc), diff, p, flips, kl])
        return md_table(["config", "items", "accuracy", "difference [95% CI]", "McNemar p", "flip rate",
                         "KL over choices"], rows)


def _below(p: float | None, alpha: float) -> bool:
    """Whether a p-value is below alpha; None (not computed) is not. A p of exactly 0.0 (a normal or t tail
    past about 38 SE) is below, where `(p or 1) < alpha` took it for 1."""
    return p is not None and p < alpha


def kv_only(config: str) -> bool:
    """Whether a spec quantizes the KV cache and nothing else."""
    if config == BASELINE:
        return False
    from qdrift.spec import QuantSpec

    s = QuantSpec.parse(config)
    return s.prefill.is_noop and s.decode.is_noop


# The accuracy difference's row: a ShortFormResult (lm-eval items) names it one way, a PairedResult the other.
DIFFERENCE = ("accuracy difference (CLT)", "difference (CLT)")


def _quantity(res, *names) -> dict | None:
    """The first of `res`'s rows whose quantity is one of `names`, in the order given; None if none is."""
    for name in names:
        for r in res.rows:
            if r["quantity"] == name:
                return r
    return None


def _short_numbers(res) -> tuple[str, str, str, str]:
    """(difference with CI, McNemar p, flip rate, KL) from a ShortFormResult or a PairedResult."""
    d = _quantity(res, *DIFFERENCE)
    m = _quantity(res, "accuracy McNemar exact", "McNemar exact")
    f = _quantity(res, "flip rate")
    k = _quantity(res, "mean KL(base||variant) over choices")
    diff = f"{fmt(d['estimate'])} {ci((d['ci_low'], d['ci_high']))}" if d else "–"
    return (diff, fmt(m["p_value"]) if m else "–", fmt(f["estimate"]) if f else "–",
            fmt(k["estimate"], 4) if k else "–")


def fit_kind(interaction: dict) -> str:
    if interaction["firth"]:
        return "Firth (separation)"
    if interaction["identical"]:
        return "model-based (same outcomes as the baseline)"
    return "cluster-robust"
