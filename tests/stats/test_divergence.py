"""Token divergence summaries and their association with failure."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats

from qdrift.stats.divergence import divergence_summary, divergence_vs_failure


def drift(n_eps=80, steps=4, tokens=25, seed=0):
    """Drift rows whose KL scale varies by episode; failures are likelier for high-KL episodes."""
    rng = np.random.default_rng(seed)
    scale = rng.gamma(2.0, 0.05, n_eps)
    ep = np.repeat(np.arange(n_eps), steps * tokens)
    kl = rng.exponential(scale[ep])
    df = pd.DataFrame(
        {
            "episode": ep,
            "step": np.tile(np.repeat(np.arange(steps), tokens), n_eps),
            "token_index": np.tile(np.arange(tokens), n_eps * steps),
            "kl": kl,
            "top1_agree": rng.random(kl.size) > np.minimum(kl, 1),
            "base_logprob": -1.0,
            "var_logprob": -1.0 - kl,
        }
    )
    fail = rng.random(n_eps) < 1 / (1 + np.exp(-(scale - scale.mean()) / (scale.std() + 1e-9) * 1.5))
    episodes = [{"episode": int(e), "success": bool(not f), "steps": steps} for e, f in enumerate(fail)]
    return df, episodes


def test_summary_numbers():
    df, _ = drift()
    r = divergence_summary(df.to_dict("records"), n_boot=300)
    kl = df["kl"].to_numpy()
    mean = r.row(quantity="mean KL")
    assert mean["estimate"] == pytest.approx(kl.mean())
    fit = sm.OLS(kl, np.ones_like(kl)).fit(cov_type="cluster", cov_kwds={"groups": df["episode"]})
    assert mean["se"] == pytest.approx(fit.bse[0])
    assert mean["se"] > kl.std(ddof=1) / np.sqrt(kl.size)  # episodes differ: tokens are not independent
    assert r.row(quantity="flip rate")["estimate"] == pytest.approx(1 - df["top1_agree"].mean())
    assert r.row(quantity="mean logprob drop")["estimate"] == pytest.approx(kl.mean())
    for q in (90, 99):
        row = r.row(quantity=f"KL p{q}")
        assert row["estimate"] == pytest.approx(np.quantile(kl, q / 100, method="inverted_cdf"))
        assert row["ci_low"] < row["estimate"] < row["ci_high"]
    assert r.n == {"tokens": kl.size, "episodes": 80}
    assert r.plot().get_xlabel() == "agent step"


def test_single_episode_falls_back_with_note():
    df, _ = drift(n_eps=1)
    r = divergence_summary(df)
    assert any("single episode" in n for n in r.notes)
    assert r.row(quantity="KL p90")["ci_low"] is None


def test_divergence_vs_failure():
    df, episodes = drift(n_eps=200, seed=1)
    r = divergence_vs_failure(df, episodes)
    row = r.row(predictor="mean_kl")
    per = df.groupby("episode")["kl"].mean().to_numpy()
    fail = np.array([not e["success"] for e in episodes])
    assert row["auc"] == pytest.approx(
        stats.mannwhitneyu(per[fail], per[~fail]).statistic / (fail.sum() * (~fail).sum())
    )
    assert row["auc"] > 0.6 and row["odds_ratio_per_sd"] > 1 and row["p_value"] < 0.05
    assert row["ci_low"] < row["odds_ratio_per_sd"] < row["ci_high"]
    assert r.n == {"episodes": 200, "failures": int(fail.sum())}
    assert r.row(predictor="flip_count")["auc"] > 0.5


def test_failure_edge_cases():
    df, episodes = drift(n_eps=30)
    with pytest.raises(ValueError, match="all 30 episodes"):
        divergence_vs_failure(df, [dict(e, success=True) for e in episodes])
    with pytest.raises(ValueError, match="no episode row"):
        divergence_vs_failure(df, episodes[1:])
    r = divergence_vs_failure(df[df.episode > 0], episodes)
    assert any("1 episodes without drift rows" in n for n in r.notes)
    # perfect separation: failures are exactly the high-KL episodes
    per = df.groupby("episode")["kl"].mean()
    sep = [dict(e, success=bool(per[e["episode"]] < per.median())) for e in episodes]
    r = divergence_vs_failure(df, sep)
    assert r.row(predictor="mean_kl")["auc"] == 1.0
    assert r.row(predictor="mean_kl")["odds_ratio_per_sd"] is None
    assert any("separates" in n for n in r.notes)
    with pytest.raises(ValueError, match="lack columns"):
        divergence_summary([{"episode": 0, "kl": 0.1}])
    with pytest.raises(ValueError, match="non-finite"):
        divergence_summary(df.assign(kl=np.nan))
