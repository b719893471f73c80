"""The verification report: one table row per run (terminal text, markdown, JSON) and plots.

Reference runs show the public verifier's counts; endpoints add trigger precision/recall/F1
against the reference, F1, trigger agreement and action agreement (the same calls) relative to the
reference noise floor, the validity difference and schema accuracy, each with its interval, and the
verdict. The footer names the system_fingerprints the answers carried, or that they carried none.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from qdrift.verify.run import VerifyAnalysis

COLUMNS = ["run", "requests", "failed", "stop", "tool_calls", "other", "valid calls", "schema acc",
           "trig P", "trig R", "trig F1", "F1 - floor", "agree - floor", "action - floor", "validity diff",
           "oracle acc", "verdict"]


def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _ci(row: dict | None, digits: int = 3) -> str:
    if row is None:
        return "-"
    if row["ci_low"] is None:
        return _num(row["estimate"], digits)
    return f"{_num(row['estimate'], digits)} [{_num(row['ci_low'], digits)}, {_num(row['ci_high'], digits)}]"


def _get(result, quantity: str) -> dict | None:
    return next((r for r in result.rows if r["quantity"] == quantity), None)


def table_rows(analysis: VerifyAnalysis) -> list[dict[str, str]]:
    """One dict of formatted cells per run, keyed by COLUMNS."""
    out = []
    floor_f1 = _get(analysis.floor, "trigger F1 (reference vs reference)") if analysis.floor else None
    for name, s in analysis.summaries.items():
        cmp = analysis.comparisons.get(name)
        row = {"run": name, "requests": str(s["requests"]), "failed": str(s["failure_count"]),
               "stop": str(s["finish_stop"]), "tool_calls": str(s["finish_tool_calls"]),
               "other": str(s["finish_others"]), "valid calls": str(s["count_successful_tool_call"]),
               "oracle acc": _num(s["oracle_accuracy"])}
        if cmp is None:
            row.update({"schema acc": _num(s["schema_accuracy"]), "trig F1": "floor " + _ci(floor_f1)
                        if floor_f1 else "-", "verdict": "reference"})
        else:
            row.update({"schema acc": _ci(_get(cmp, "schema accuracy (endpoint)")),
                        "trig P": _num(_get(cmp, "trigger precision")["estimate"]),
                        "trig R": _num(_get(cmp, "trigger recall")["estimate"]),
                        "trig F1": _ci(_get(cmp, "trigger F1")), "F1 - floor": _ci(_get(cmp, "trigger F1 - floor")),
                        "agree - floor": _ci(_get(cmp, "trigger agreement - floor")),
                        "action - floor": _ci(_get(cmp, "action agreement - floor")),
                        "validity diff": _ci(_get(cmp, "validity - reference")), "verdict": cmp.conclusion})
        out.append({c: row.get(c, "-") for c in COLUMNS})
    return out


def render_text(analysis: VerifyAnalysis) -> str:
    rows = table_rows(analysis)
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS)]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in COLUMNS) for r in rows]
    return "\n".join(lines + [""] + _footer(analysis))


def _footer(analysis: VerifyAnalysis) -> list[str]:
    lines = []
    if analysis.floor is not None:
        f = analysis.floor
        lines.append(f"Noise floor over {f.n['reference_runs']} reference runs, {f.n['requests']} requests: " + "; ".join(
            f"{r['quantity']} {_ci(r)}" for r in f.rows))
    else:
        lines.append("One reference run: no noise floor (replay the reference >= 2 times).")
    margin = "none" if analysis.margin is None else f"±{analysis.margin:g}"
    lines.append(f"Intervals {100 * (1 - analysis.alpha):g}%; equivalence margin {margin}.")
    for name, counts in analysis.run.fingerprints.items():
        if counts:
            lines.append(f"{name} answered as system_fingerprint " + ", ".join(f"{fp} ({n})" for fp, n in counts.items()))
    return lines + [f"Note: {note}" for note in analysis.run.notes]


def render_markdown(analysis: VerifyAnalysis) -> str:
    rows = table_rows(analysis)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r[c] for c in COLUMNS) + " |" for r in rows]
    lines += [""] + _footer(analysis) + [""]
    for cmp in analysis.comparisons.values():
        lines += ["```", cmp.summary(), "```", ""]
    return "\n".join(lines)


def to_json(analysis: VerifyAnalysis, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything in the report as plain JSON values (NaN as null), with `meta` (files, hashes, dates)."""
    return _clean({
        "meta": meta or {},
        "reference": analysis.run.reference_name,
        "reference_runs": len(analysis.run.reference_runs),
        "requests": len(analysis.run.requests),
        "margin": analysis.margin,
        "alpha": analysis.alpha,
        "summaries": analysis.summaries,
        "system_fingerprints": analysis.run.fingerprints,
        "notes": analysis.run.notes,
        "noise_floor": analysis.floor.to_dict() if analysis.floor is not None else None,
        "endpoints": {name: {**c.to_dict(), "conclusion": c.conclusion} for name, c in analysis.comparisons.items()},
    })


def plot(analysis: VerifyAnalysis, path: str | Path) -> Path:
    """Trigger F1 and schema accuracy per endpoint with intervals, against the reference's bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(analysis.comparisons)
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.5 * max(len(names), 2) + 2), sharey=True)
    panels = (("trigger F1", "trigger F1 vs reference", _get(analysis.floor, "trigger F1 (reference vs reference)")
               if analysis.floor else None, "noise floor (ref vs ref)"),
              ("schema accuracy (endpoint)", "schema accuracy", None, "reference"))
    for ax, (quantity, title, band, band_label) in zip(axes, panels, strict=True):
        for y, name in enumerate(names):
            r = _get(analysis.comparisons[name], quantity)
            if r["ci_low"] is not None:
                # max(0, .): a degenerate interval can sit a rounding error inside its estimate
                err = [[max(0.0, r["estimate"] - r["ci_low"])], [max(0.0, r["ci_high"] - r["estimate"])]]
                ax.errorbar(r["estimate"], y, xerr=err,
                            fmt="o", capsize=3, color="C0")
            else:
                ax.plot(r["estimate"], y, "o", color="C0")
        if quantity.startswith("schema") and names:
            band = _get(analysis.comparisons[names[0]], "schema accuracy (reference)")
        if band is not None and band["ci_low"] is not None:
            ax.axvspan(band["ci_low"], band["ci_high"], color="grey", alpha=0.25, label=band_label)
            ax.axvline(band["estimate"], color="grey", lw=1)
            ax.legend(loc="lower left", fontsize=8)
        ax.set_yticks(range(len(names)), names)
        ax.set_title(title)
        ax.set_xlim(-0.02, 1.02)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(analysis: VerifyAnalysis, out_dir: str | Path, meta: dict[str, Any] | None = None) -> dict[str, Path]:
    """report.md, report.json and report.png in `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "report.md"
    md.write_text(render_markdown(analysis), encoding="utf-8")
    js = out_dir / "report.json"
    js.write_text(json.dumps(to_json(analysis, meta), indent=2, allow_nan=False), encoding="utf-8")
    paths = {"markdown": md, "json": js}
    if analysis.comparisons:
        paths["plot"] = plot(analysis, out_dir / "report.png")
    return paths


def _clean(v):
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "tolist"):
        return _clean(v.tolist())
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
