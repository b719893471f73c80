"""The paper's table helpers on hand-made rows: what each cell shows is computed here directly."""

import math

from qdrift.paper.tables import ModelResults, coef

PHASED = "wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit"  # a spec string with '/' in it


def episodes(config: str, first_errors: dict[int, int], horizon: int = 50, seeds: int = 30) -> list[dict]:
    return [{"env": "pointer_chase", "task": "pointer_chase", "config": config, "horizon": horizon, "seed": s,
             "trial": 0, "steps": horizon, "first_error_step": first_errors.get(s),
             "success": s not in first_errors, "stop_reason": "done"} for s in range(seeds)]


def test_a_variant_whose_spec_has_a_slash_gets_its_own_ratio_row():
    res = ModelResults("m", {"baseline": "baseline", PHASED: "phased"})
    res.episodes["pointer_chase"] = episodes("baseline", {1: 10, 2: 20}) + episodes(PHASED, {3: 5, 4: 7, 5: 9, 6: 1})
    table = res.step_error_table("pointer_chase")
    phased = next(line for line in table.splitlines() if line.startswith("| phased"))
    # 4 first errors against 2: the rate ratio is (4 / at-risk) / (2 / at-risk), at-risk counted here.
    at_risk = {"baseline": 28 * 50 + 10 + 20, PHASED: 26 * 50 + 5 + 7 + 9 + 1}
    ratio = (4 / at_risk[PHASED]) / (2 / at_risk["baseline"])
    assert "reference" not in phased and f"| {ratio:.2f} |" in phased


def test_coefficients_print_as_fixed_digits_and_rounding_noise_as_zero():
    assert coef(3e-15) == coef(-2.5e-14) == "0.000"
    assert coef(-0.8221) == "-0.822" and coef(math.nan) == "–"
