"""Endpoint versus reference, judged against the reference's own repeat-to-repeat noise.

A sampled reference does not agree with itself: the public K2 Vendor Verifier's official API
reaches only ~76-84% trigger F1 against its own repeat run, so a fixed pass line cannot tell a
precision loss from sampling noise. Here the reference is replayed R >= 2 times. The noise floor
is the mean agreement (on whether a tool is called, and on the exact calls made: the action) and
trigger F1 over all pairs of reference runs; an endpoint's agreement is
its mean over the R reference runs. If the endpoint samples from the same distribution as the
reference, the two are exchangeable and both expectations are equal, so "endpoint minus floor"
has mean zero under that null, item by item. The per-item differences are paired (same requests)
and go to `qdrift.stats.paired_comparison` (CLT and bootstrap intervals, TOST against a margin);
F1, not a per-item mean, gets a paired bootstrap over requests written here (numpy), resampling
every run's answers to a request together. Validity (no malformed tool call) is compared the
same way, plus McNemar against the first reference run; schema accuracy gets a Wilson interval
(statsmodels). A request that failed (no response) in any run taking part is left out of the
paired analyses and counted in `n`.
"""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any

import numpy as np
from statsmodels.stats.proportion import proportion_confint

from qdrift.stats.multiple import adjust
from qdrift.stats.paired import paired_comparison
from qdrift.stats.result import Result
from qdrift.verify.metrics import ResponseScore, run_summary

_BOOT_CHUNK = 250


class VerifyComparison(Result):
    """One endpoint against the reference runs; `conclusion` is the headline."""

    @property
    def conclusion(self) -> str:
        return self.extra["conclusion"]

    def estimate(self, quantity: str) -> dict[str, Any]:
        return self.row(quantity=quantity)


def _check_runs(runs: list[list[ResponseScore]]) -> None:
    ids = [s.id for s in runs[0]]
    for k, run in enumerate(runs[1:], 1):
        if [s.id for s in run] != ids:
            raise ValueError(f"run {k} scores other requests (or another order) than run 0; score every run on "
                             "the same request list")


def _arrays(runs: list[list[ResponseScore]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[tuple]]]:
    """(kept-request mask, triggered[r, i], valid[r, i], actions[r][i]) on requests every run answered."""
    _check_runs(runs)
    ok = np.array([[s.ok for s in run] for run in runs]).all(axis=0)
    trig = np.array([[s.triggered for s in run] for run in runs])[:, ok]
    valid = np.array([[s.valid for s in run] for run in runs])[:, ok]
    actions = [[s.action for s, keep in zip(run, ok, strict=True) if keep] for run in runs]
    return ok, trig, valid, actions


def _same(a: list[tuple], b: list[tuple]) -> np.ndarray:
    return np.array([x == y for x, y in zip(a, b, strict=True)], dtype=float)


def _weights(n: int, n_boot: int, rng: np.random.Generator):
    """Bootstrap resampling of n requests as multinomial counts, in chunks (B x n ints at a time)."""
    for start in range(0, n_boot, _BOOT_CHUNK):
        yield rng.multinomial(n, np.full(n, 1 / n), size=min(_BOOT_CHUNK, n_boot - start)).astype(float)


def _prf(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted precision, recall, F1 of a's triggers against b's; rows of w are resamples."""
    tp, fp, fn = w @ (a & b), w @ (a & ~b), w @ (~a & b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return tp / (tp + fp), tp / (tp + fn), 2 * tp / (2 * tp + fp + fn)


def _row(quantity: str, estimate: float, se=None, lo=None, hi=None, p=None, detail: str = "") -> dict[str, Any]:
    def f(v):
        return None if v is None else float(v)

    return {"quantity": quantity, "estimate": float(estimate), "se": f(se), "ci_low": f(lo), "ci_high": f(hi),
            "p_value": f(p), "detail": detail}


def _boot_row(quantity: str, point: float, boots: np.ndarray, alpha: float, detail: str) -> dict[str, Any]:
    boots = boots[np.isfinite(boots)]
    if boots.size == 0:
        return _row(quantity, point, detail=detail + "; no finite resample")
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return _row(quantity, point, boots.std(ddof=1) if boots.size > 1 else None, lo, hi, None, detail)


def _f1_stats(e_trig: np.ndarray | None, refs: np.ndarray, n_boot: int, alpha: float,
              rng: np.random.Generator) -> dict[str, tuple[float, np.ndarray]]:
    """Point estimates and bootstrap draws of mean F1/P/R (endpoint vs refs) and the ref-vs-ref F1 floor."""
    n = refs.shape[1]
    pairs = list(combinations(range(refs.shape[0]), 2))

    def measures(w: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        if e_trig is not None:
            prf = [_prf(e_trig, r, w) for r in refs]
            out["precision"] = np.mean([p for p, _, _ in prf], axis=0)
            out["recall"] = np.mean([r for _, r, _ in prf], axis=0)
            out["f1"] = np.mean([f for _, _, f in prf], axis=0)
        if pairs:
            out["floor"] = np.mean([_prf(refs[j], refs[k], w)[2] for j, k in pairs], axis=0)
        if "f1" in out and "floor" in out:
            out["diff"] = out["f1"] - out["floor"]
            with np.errstate(divide="ignore", invalid="ignore"):
                out["ratio"] = out["f1"] / out["floor"]
        return out

    point = {k: float(v[0]) for k, v in measures(np.ones((1, n))).items()}
    draws: dict[str, list[np.ndarray]] = {k: [] for k in point}
    for w in _weights(n, n_boot, rng):
        for k, v in measures(w).items():
            draws[k].append(v)
    return {k: (point[k], np.concatenate(draws[k]) if draws[k] else np.array([])) for k in point}


def _pair_floor(refs_actions: list[list[tuple]]) -> np.ndarray:
    pairs = list(combinations(range(len(refs_actions)), 2))
    return np.mean([_same(refs_actions[j], refs_actions[k]) for j, k in pairs], axis=0)


def noise_floor(refs: list[list[ResponseScore]], alpha: float = 0.05, n_boot: int = 2000,
                seed: int = 0) -> Result:
    """How well R >= 2 reference runs agree with each other: trigger agreement, trigger F1, action agreement."""
    if len(refs) < 2:
        raise ValueError(f"the noise floor needs at least 2 reference runs, got {len(refs)}; "
                         "replay the reference again (--reference-repeats 3)")
    ok, trig, _, actions = _arrays(refs)
    n = int(ok.sum())
    if n < 2:
        raise ValueError(f"only {n} requests answered in every reference run; need at least 2")
    rng = np.random.default_rng(seed)
    agree = _pair_floor([[(t,) for t in row] for row in trig])
    action = _pair_floor(actions)
    rows = []
    for label, x in (("trigger agreement (reference vs reference)", agree),
                     ("action agreement (reference vs reference)", action)):
        boots = np.concatenate([w @ x / n for w in _weights(n, n_boot, rng)]) if n_boot else np.array([])
        rows.append(_boot_row(label, x.mean(), boots, alpha, "mean over reference pairs; bootstrap over requests"))
    f1 = _f1_stats(None, trig, n_boot, alpha, rng)["floor"]
    pair_f1 = [float(_prf(trig[j], trig[k], np.ones((1, n)))[2][0]) for j, k in combinations(range(len(refs)), 2)]
    rows.append(_boot_row("trigger F1 (reference vs reference)", f1[0], f1[1], alpha,
                          f"per pair min {min(pair_f1):.4f}, max {max(pair_f1):.4f}"))
    return Result(
        title="Reference noise floor", method="agreement between repeated reference runs; paired bootstrap "
                                                "over requests", n={"requests": n, "dropped": int((~ok).sum()),
                                                                    "reference_runs": len(refs)},
        rows=rows, extra={"agreement_items": agree, "pair_f1": pair_f1})


def _copy(row: dict, quantity: str, detail: str | None = None) -> dict:
    out = {**row, "quantity": quantity}
    if detail is not None:
        out["detail"] = detail
    return out


def compare_to_reference(endpoint: list[ResponseScore], refs: list[list[ResponseScore]], name: str = "endpoint",
                         margin: float | None = None, alpha: float = 0.05, n_boot: int = 2000,
                         seed: int = 0) -> VerifyComparison:
    """`endpoint` against the reference runs: trigger F1 and agreement relative to the floor, validity, schema accuracy."""
    if not refs:
        raise ValueError("need at least one reference run")
    if margin is not None and not 0 < margin < 1:
        raise ValueError(f"margin must be in (0, 1), got {margin}")
    ok, trig, valid, actions = _arrays([endpoint, *refs])
    n, R = int(ok.sum()), len(refs)
    if n < 2:
        raise ValueError(f"only {n} requests answered by {name} and every reference run; need at least 2")
    e_trig, r_trig = trig[0], trig[1:]
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    rows: list[dict] = []
    f1 = _f1_stats(e_trig, r_trig, n_boot, alpha, rng)
    for key, label in (("precision", "trigger precision"), ("recall", "trigger recall"), ("f1", "trigger F1")):
        rows.append(_boot_row(label, *f1[key], alpha, f"{name} vs each of {R} reference run(s), mean"))
    agreement = np.mean([(e_trig == r).astype(float) for r in r_trig], axis=0)
    boots = np.concatenate([w @ agreement / n for w in _weights(n, n_boot, rng)]) if n_boot else np.array([])
    rows.append(_boot_row("trigger agreement", agreement.mean(), boots, alpha, f"mean over {R} reference run(s)"))
    tests: list[tuple[str, Any]] = []
    if R >= 2:
        rows.append(_boot_row("trigger F1 floor", *f1["floor"], alpha, "reference vs reference, mean over pairs"))
        rows.append(_boot_row("trigger F1 - floor", *f1["diff"], alpha, "paired bootstrap over requests"))
        rows.append(_boot_row("trigger F1 / floor", *f1["ratio"], alpha, "paired bootstrap over requests"))
        floor = _pair_floor([[(t,) for t in row] for row in r_trig])
        pc = paired_comparison(floor, agreement, alpha=alpha, n_boot=n_boot, seed=seed, margin=margin,
                               a_name="floor", b_name=name)
        rows.append(_copy(pc.row(quantity="difference (CLT)"), "trigger agreement - floor"))
        if n_boot:
            rows.append(_copy(pc.row(quantity="difference (bootstrap)"), "trigger agreement - floor (bootstrap)"))
        tests.append(("trigger agreement", pc))
        # Trigger agreement cannot see a call made with other arguments; action agreement can, so it is
        # tested (and needed for equivalence) like trigger agreement.
        e_action = np.mean([_same(actions[0], a) for a in actions[1:]], axis=0)
        pa = paired_comparison(_pair_floor(actions[1:]), e_action, alpha=alpha, n_boot=0, margin=margin,
                               a_name="floor", b_name=name)
        rows.append(_copy(pa.row(quantity="difference (CLT)"), "action agreement - floor",
                          "same trigger and identical calls (name and arguments)"))
        tests.append(("action agreement", pa))
    else:
        notes.append("one reference run: no noise floor, so trigger F1 and agreement have no baseline to be "
                     "judged against (use --reference-repeats 3)")
    ref_valid = valid[1:].mean(axis=0)
    pv = paired_comparison(ref_valid, valid[0].astype(float), alpha=alpha, n_boot=n_boot, seed=seed, margin=margin,
                           a_name="reference", b_name=name)
    rows.append(_copy(pv.row(quantity="difference (CLT)"), "validity - reference",
                      f"valid = no malformed tool call; reference averaged over {R} run(s)"))
    tests.append(("validity", pv))
    p1 = paired_comparison(valid[1].astype(float), valid[0].astype(float), alpha=alpha, n_boot=0,
                           a_name="reference run 1", b_name=name)
    rows.append(_copy(p1.row(quantity="McNemar exact"), "validity McNemar vs reference run 1"))
    for label, run in ((name, endpoint), ("reference", [s for r in refs for s in r])):
        s = run_summary(run)
        k, m = s["count_successful_tool_call"], s["count_finish_reason_tool_calls"]
        lo, hi = proportion_confint(k, m, alpha=alpha, method="wilson") if m else (None, None)
        rows.append(_row(f"schema accuracy ({'endpoint' if label == name else 'reference'})",
                         k / m if m else math.nan, None, lo, hi, None, f"{k}/{m} triggered calls valid; Wilson"))
    if margin is not None:
        for label, pc in tests:
            t = next(r for r in pc.rows if r["quantity"].startswith("TOST"))
            rows.append(_copy(t, f"TOST {label} ±{margin:g}"))
    ok_runs = np.array([[s.ok for s in run] for run in [endpoint, *refs]])
    endpoint_only_failed = int((~ok_runs[0] & ok_runs[1:].all(axis=0)).sum())
    conclusion = _conclusion(tests, margin, alpha, endpoint_only_failed / ok_runs.shape[1])
    if endpoint_only_failed:
        notes.append(f"{name} failed {endpoint_only_failed} of {ok_runs.shape[1]} requests that every reference run "
                     "answered; those are left out of the comparison")
    if margin is not None:
        notes.append(f"TOST intervals are {100 * (1 - 2 * alpha):g}%; the other intervals {100 * (1 - alpha):g}%")
    if len(tests) > 1:
        notes.append(f"a 'different' verdict is Holm-adjusted over its {len(tests)} difference tests; "
                     "nothing is corrected for multiplicity across endpoints")
    else:
        notes.append("difference tests are not corrected for multiplicity across endpoints")
    return VerifyComparison(
        title=f"{name} vs reference", method="paired over requests against R reference runs "
                                             "(qdrift.stats.paired_comparison; paired bootstrap for F1)",
        n={"requests": n, "dropped": int((~ok).sum()), "reference_runs": R}, rows=rows, notes=notes,
        extra={"name": name, "margin": margin, "alpha": alpha, "conclusion": conclusion})


def _conclusion(tests: list[tuple[str, Any]], margin: float | None, alpha: float,
                endpoint_failed_share: float = 0.0) -> str:
    """'equivalent' when every TOST passes (naming any significant difference inside the margin); 'different'
    when a difference is significant after Holm's adjustment over the tests and not shown to be inside the
    margin; else 'inconclusive'.

    Equivalence needs the trigger- and action-agreement tests, which need a noise floor (two reference
    runs or more): validity alone cannot see a model that stops calling tools (a turn without a call is
    valid), and trigger agreement alone cannot see a call made with other arguments.
    Nor is it claimed when the endpoint failed more of the requests the reference answered than the
    margin allows, since the comparison sees only the requests every run answered.
    """
    labels = [label for label, _ in tests]
    raw = [pc.row(quantity="difference (CLT)")["p_value"] for _, pc in tests]
    finite = {label: p for label, p in zip(labels, raw, strict=True) if p is not None and math.isfinite(p)}
    rejected = adjust(finite, method="holm", alpha=alpha).rows if finite else []
    significant = [r["name"] for r in rejected if r["reject"]]
    if margin is not None and all(next(r for r in pc.rows if r["quantity"].startswith("TOST"))["p_value"] < alpha
                                  for _, pc in tests):
        if not {"trigger agreement", "action agreement"} <= set(labels):
            return ("inconclusive: one reference run gives no noise floor, and validity alone cannot show "
                    "equivalence (a turn without a call is valid); use --reference-repeats 2 or more")
        if endpoint_failed_share > margin:
            return (f"inconclusive: the endpoint failed {endpoint_failed_share:.1%} of the requests the reference "
                    f"answered, more than the margin ±{margin:g}")
        inside = f"; a significant difference inside the margin: {', '.join(significant)}" if significant else ""
        return f"equivalent within ±{margin:g}{inside}"
    if significant:
        return "different: " + ", ".join(significant)
    return "inconclusive" if margin is not None else "no difference detected"
