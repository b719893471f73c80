"""Input checks and the person-period / at-risk bookkeeping every analysis relies on."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from qdrift.stats.rows import (
    cluster_ids,
    count_at_risk,
    default_baseline,
    episode_frame,
    failure_times,
    hazard_cells,
    person_period,
    pick_configs,
    require_horizons,
)


def row(**kw):
    base = {"episode": 0, "env": "ledger", "horizon": 4, "seed": 0, "trial": 0, "success": True, "steps": 4,
            "first_error_step": None, "stop_reason": "done", "config": "baseline"}
    base.update(kw)
    return base


def test_list_of_dicts_and_frame_give_the_same_checked_frame():
    rows = [row(), row(episode=1, success=False, first_error_step=2, config="w4g128")]
    a, b = episode_frame(rows), episode_frame(pd.DataFrame(rows))
    pd.testing.assert_frame_equal(a, b)
    assert a["success"].dtype == bool and np.isnan(a["first_error_step"][0]) and a["first_error_step"][1] == 2


@pytest.mark.parametrize("rows, match", [
    ([], "no episode rows"),
    ([{"episode": 0}], r"missing column\(s\) \['config'"),
    ([row(horizon=None)], "'horizon' must hold integers >= 1.*empty or missing"),
    ([row(horizon=0)], "'horizon' must hold integers >= 1"),
    ([row(success="yes")], "'success' must be bool"),
    ([row(first_error_step=-1)], "first_error_step must be None or a step index"),
    ([row(first_error_step=4)], "first_error_step must be < steps"),
    ([row(config=None)], "'config' has missing values"),
    ([1, 2], "list of dicts"),
])
def test_bad_rows_raise_clear_errors(rows, match):
    with pytest.raises(ValueError, match=match):
        episode_frame(rows)


def test_custom_config_column_is_named_in_errors():
    with pytest.raises(ValueError, match="config_col='quant'"):
        episode_frame([row()], config_col="quant")


def test_config_and_cluster_checks():
    df = episode_frame([row(), row(episode=1, seed=1, config="w4g128", horizon=8)])
    assert pick_configs(df, "config", ["w4g128", None]) == ["w4g128"]
    with pytest.raises(ValueError, match=r"valid configs: \['baseline', 'w4g128'\]"):
        pick_configs(df, "config", ["w8"])
    assert default_baseline(df, "config", None) == ("baseline", [])
    name, notes = default_baseline(df[df.config == "w4g128"], "config", None)
    assert name == "w4g128" and "first config" in notes[0]
    codes, g = cluster_ids(df)
    assert g == 2 and list(codes) == [0, 1]
    with pytest.raises(ValueError, match="only 1 cluster"):
        cluster_ids(df[df.seed == 0])
    with pytest.raises(ValueError, match="at least 2 distinct horizons"):
        require_horizons(df, "config", ["baseline"])


def test_failure_times_and_person_period_agree_with_counts():
    rows = [row(episode=0, steps=4, first_error_step=None),   # censored at 4: at risk on steps 0..3
            row(episode=1, steps=6, first_error_step=2, horizon=6),  # at risk 0..2, error on 2
            row(episode=2, steps=3, first_error_step=0, horizon=3)]  # error on step 0
    df = episode_frame(rows)
    t, e = failure_times(df)
    assert list(t) == [4, 3, 1] and list(e) == [False, True, True]
    pp = person_period(df)
    assert list(pp["row"]) == [0, 0, 0, 0, 1, 1, 1, 2]
    assert list(pp["step"]) == [0, 1, 2, 3, 0, 1, 2, 0]
    assert list(pp["event"]) == [False] * 6 + [True, True]
    cells = hazard_cells(df, "config", ["baseline"])
    long = pp.groupby("step").agg(at_risk=("event", "size"), events=("event", "sum")).reset_index()
    assert list(cells["at_risk"]) == list(long["at_risk"]) and list(cells["events"]) == list(long["events"])


def test_count_at_risk_random_against_expansion():
    rng = np.random.default_rng(0)
    t = rng.integers(1, 20, 500)
    e = rng.random(500) < 0.6
    a, ev = count_at_risk(t, e)
    assert a[0] == 500 and all(a[s] == (t > s).sum() for s in range(len(a)))
    assert all(ev[s] == ((t - 1 == s) & e).sum() for s in range(len(ev)))
