"""The common shape of every analysis result: a readable summary, a dict, a frame, a plot.

An analysis returns a `Result` whose `rows` are the estimates (one dict per quantity, with the
same keys), `method` names the test or estimator and its source library, `n` the sample it used
and `notes` anything a reader must know (a fallback to an exact test, dropped items, a warning).
`summary()` prints them in the manner of statsmodels' summary tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


def _fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3e}"
        return f"{value:.4f}"
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return f"[{_fmt(float(value[0]))}, {_fmt(float(value[1]))}]"
    return str(value)


@dataclass
class Result:
    title: str
    method: str
    n: dict[str, int]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # analysis-specific data (e.g. curves) for .plot()

    def summary(self) -> str:
        width = 78
        lines = ["=" * width, self.title.center(width), "=" * width, f"Method: {self.method}"]
        lines.append("n: " + ", ".join(f"{k}={_fmt(v)}" for k, v in self.n.items()))
        lines.append("-" * width)
        if self.rows:
            keys = list(self.rows[0])
            cells = [[_fmt(r.get(k)) for k in keys] for r in self.rows]
            widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
            lines.append("  ".join(k.rjust(w) for k, w in zip(keys, widths, strict=True)))
            for c in cells:
                lines.append("  ".join(v.rjust(w) for v, w in zip(c, widths, strict=True)))
        for note in self.notes:
            lines.append(f"Note: {note}")
        lines.append("=" * width)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, p, cycle):  # IPython / notebooks
        p.text(self.summary())

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "method": self.method, "n": dict(self.n), "rows": [dict(r) for r in self.rows],
                "notes": list(self.notes)}

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def row(self, **match) -> dict[str, Any]:
        """The one row whose fields equal `match` (KeyError naming what exists otherwise)."""
        found = [r for r in self.rows if all(r.get(k) == v for k, v in match.items())]
        if len(found) != 1:
            raise KeyError(f"{len(found)} rows match {match}; rows: {[{k: r[k] for k in match if k in r} for r in self.rows]}")
        return found[0]

    def plot(self, ax=None):
        raise NotImplementedError(f"{self.title}: no plot for this analysis (see .summary())")
