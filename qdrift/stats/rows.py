"""Turn the agent runner's tidy episode rows into checked frames and arrays.

Every analysis in qdrift.stats starts here so that a malformed input fails once, early and with a
message that names the problem and what would be valid, instead of as a NaN deep inside a fit.
The rows are `qdrift.envs.runner.EpisodeRecord.row()` dicts plus a configuration column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

EPISODE_COLUMNS = ("episode", "env", "horizon", "seed", "trial", "success", "steps", "first_error_step")
DEFAULT_CLUSTER = ("env", "seed")  # an instance: the episodes that share it are correlated


def episode_frame(rows, config_col: str = "config", required: Sequence[str] | None = None) -> pd.DataFrame:
    """A checked copy of `rows` (list of dicts or DataFrame) with canonical dtypes.

    `success` becomes bool, `horizon`/`steps` int, `first_error_step` float (NaN = no error) and the
    config column str. Raises ValueError naming missing columns or bad values.
    """
    if isinstance(rows, pd.DataFrame):
        df = rows.copy()
    else:
        rows = list(rows) if not isinstance(rows, list) else rows
        if rows and not all(isinstance(r, dict) for r in rows):
            raise ValueError("rows must be a pandas DataFrame or a list of dicts (one per episode)")
        df = pd.DataFrame(rows)
    if len(df) == 0:
        raise ValueError("no episode rows: pass at least one row per config and horizon")
    need = list(required) if required is not None else list(EPISODE_COLUMNS)
    need = [config_col, *[c for c in need if c != config_col]]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; the rows have {sorted(map(str, df.columns))} "
                         f"and an analysis needs {need} (config_col={config_col!r} names the configuration)")
    if df[config_col].isna().any():
        raise ValueError(f"column {config_col!r} has missing values; every episode needs a configuration")
    df[config_col] = df[config_col].astype(str)
    if "horizon" in df:
        df["horizon"] = _int_column(df, "horizon", minimum=1)
    if "steps" in df:
        df["steps"] = _int_column(df, "steps", minimum=0)
    if "success" in df:
        df["success"] = _bool_column(df, "success")
    if "first_error_step" in df:
        col = df["first_error_step"]
        if pd.api.types.is_numeric_dtype(col) and col.dtype != bool:
            fe = col.astype(float)
        else:  # None / NaN / pd.NA mixed with ints arrives as object
            fe = pd.to_numeric(col.astype(object).where(col.notna(), np.nan), errors="coerce").astype(float)
        bad = col.notna() & (fe.isna() | (fe != np.floor(fe)) | (fe < 0))
        if bad.any():
            raise ValueError(f"first_error_step must be None or a step index >= 0; bad values "
                             f"{df.loc[bad, 'first_error_step'].head(3).tolist()}")
        if "steps" in df and (fe >= df["steps"]).any():
            i = int(np.flatnonzero((fe >= df["steps"]).to_numpy())[0])
            raise ValueError(f"first_error_step must be < steps (it is a 0-based index of a step taken); "
                             f"row {i} has first_error_step={fe.iloc[i]:g}, steps={df['steps'].iloc[i]}")
        df["first_error_step"] = fe
    return df.reset_index(drop=True)


def _int_column(df: pd.DataFrame, col: str, minimum: int) -> pd.Series:
    v = pd.to_numeric(df[col], errors="coerce")
    bad = v.isna() | (v != np.floor(v)) | (v < minimum)
    if bad.any():
        raise ValueError(f"column {col!r} must hold integers >= {minimum}; bad values "
                         f"{df.loc[bad, col].head(3).tolist()} (empty or missing {col}s are not allowed)")
    return v.astype(np.int64)


def _bool_column(df: pd.DataFrame, col: str) -> pd.Series:
    v = df[col]
    if v.dtype == bool:
        return v
    ok = v.isin([True, False, 0, 1])
    if not ok.all():
        raise ValueError(f"column {col!r} must be bool (or 0/1); bad values {v[~ok].head(3).tolist()}")
    return v.astype(bool)


def config_order(df: pd.DataFrame, config_col: str) -> list[str]:
    """Configs in order of first appearance (a stable, caller-controlled order for tables and plots)."""
    return list(dict.fromkeys(df[config_col].tolist()))


def pick_configs(df: pd.DataFrame, config_col: str, wanted: Iterable[str | None]) -> list[str]:
    """Check that each named config has rows; ValueError naming the valid ones otherwise."""
    have = config_order(df, config_col)
    out = []
    for c in wanted:
        if c is None:
            continue
        if str(c) not in have:
            raise ValueError(f"config {c!r} has no rows in column {config_col!r}; valid configs: {have}")
        out.append(str(c))
    return out


def default_baseline(df: pd.DataFrame, config_col: str, baseline: str | None) -> tuple[str, list[str]]:
    """The reference config: the one given, else one named 'baseline', else the first seen; plus a note."""
    have = config_order(df, config_col)
    if baseline is not None:
        pick_configs(df, config_col, [baseline])
        return str(baseline), []
    if "baseline" in have:
        return "baseline", []
    return have[0], [f"no baseline given and none named 'baseline'; using the first config seen, {have[0]!r}"]


def require_horizons(df: pd.DataFrame, config_col: str, configs: Sequence[str], minimum: int = 2) -> list[int]:
    """The sorted horizons; ValueError if a config has fewer than `minimum` distinct horizons."""
    for c in configs:
        hs = np.unique(df.loc[df[config_col] == c, "horizon"])
        if len(hs) < minimum:
            raise ValueError(f"config {c!r} has horizons {hs.tolist()}; this analysis needs at least {minimum} "
                             f"distinct horizons per config to estimate a trend in L")
    return sorted(int(h) for h in np.unique(df.loc[df[config_col].isin(configs), "horizon"]))


def cluster_ids(df: pd.DataFrame, cluster: Sequence[str] | str | None = DEFAULT_CLUSTER,
                minimum: int = 2) -> tuple[np.ndarray, int]:
    """Integer cluster codes (0..G-1) for the instance columns `cluster`; ValueError if fewer than `minimum`."""
    if cluster is None:
        codes = np.arange(len(df))
    else:
        cols = [cluster] if isinstance(cluster, str) else list(cluster)
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"cluster column(s) {missing} not in rows; have {sorted(map(str, df.columns))}")
        codes = df.groupby(cols, sort=False, dropna=False).ngroup().to_numpy()
    g = int(codes.max()) + 1 if len(codes) else 0
    if g < minimum:
        raise ValueError(f"only {g} cluster(s) of {cluster!r}: cluster-robust errors and the cluster bootstrap "
                         f"need at least {minimum} independent instances (pass cluster=None to treat every "
                         f"episode as independent, or run more seeds)")
    return codes, g


def failure_times(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(time, event): steps survived including the failing one; an episode with no error is censored at `steps`.

    An error at 0-based step k is an event at time k + 1 (the episode was at risk on steps 0..k).
    """
    fe = df["first_error_step"].to_numpy(float)
    event = ~np.isnan(fe)
    time = np.where(event, np.nan_to_num(fe) + 1, df["steps"].to_numpy(float))
    return time.astype(np.int64), event


def hazard_cells(df: pd.DataFrame, config_col: str, configs: Sequence[str]) -> pd.DataFrame:
    """Person-period records aggregated to (config, step): episodes at risk and first errors at each step.

    Expanding every episode into one row per step at risk is what the discrete-time hazard model
    needs, but the likelihood only depends on the per-(config, step) counts, so they are counted
    directly (bincount + reverse cumsum) instead of materialising millions of rows.
    """
    time, event = failure_times(df)
    out = []
    for c in configs:
        m = (df[config_col] == c).to_numpy()
        at_risk, events = count_at_risk(time[m], event[m])
        keep = at_risk > 0
        if keep.any():
            out.append(pd.DataFrame({config_col: c, "step": np.arange(len(at_risk))[keep],
                                     "at_risk": at_risk[keep], "events": events[keep]}))
    if not out:
        raise ValueError("no steps at risk: every episode has steps == 0")
    return pd.concat(out, ignore_index=True)


def count_at_risk(time: np.ndarray, event: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(at_risk[s], events[s]) for steps s = 0..max(time)-1 from spell lengths and event flags."""
    time = np.asarray(time, dtype=np.int64)
    event = np.asarray(event, dtype=bool)
    size = int(time.max()) if len(time) else 0
    if size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ends = np.bincount(time, minlength=size + 1)  # episodes whose at-risk spell has length t
    at_risk = ends[::-1].cumsum()[::-1][1:]  # at risk on step s: spell length > s
    events = np.bincount(time[event] - 1, minlength=size)[:size]
    return at_risk, events


def person_period(df: pd.DataFrame) -> pd.DataFrame:
    """One row per episode per step at risk (episode index, step, event): the long form, for small data."""
    time, event = failure_times(df)
    idx = np.repeat(np.arange(len(df)), time)
    start = np.repeat(np.cumsum(time) - time, time)
    step = np.arange(len(idx)) - start
    ev = np.zeros(len(idx), dtype=bool)
    last = np.cumsum(time)[event & (time > 0)] - 1
    ev[last] = True
    return pd.DataFrame({"row": idx, "step": step, "event": ev})
