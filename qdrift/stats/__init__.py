"""Statistics for quantization comparisons, on scipy and statsmodels, taking the runner's tidy rows.

Paired comparisons of two configurations on the same items (`paired_comparison`,
`paired_from_rows`: CLT and cluster-robust SEs, McNemar exact and mid-p, paired bootstrap, TOST
equivalence), power and minimum detectable effects (`mde_paired`, `power_paired`,
`n_for_equivalence`, `mde_table`; for per-step error rates over long episodes `mde_step_error_ratio`,
`power_step_error_ratio`, `step_power_table`), per-step accuracy with episode-clustered intervals
(`per_step_accuracy`), multiple-comparison correction (`adjust`), token-level
divergence and its growth along the trajectory (`divergence_summary`, `divergence_vs_failure`,
`drift_trend`), and compounding error versus trajectory length (`success_by_horizon`,
`compounding_test`, `hazard_test`, `kaplan_meier`, `logrank`, `cox`, `half_horizon`,
`step_error_ratio`). Every analysis returns a `Result` with
`.summary()`, `.to_dict()`, `.to_frame()` and, where a picture helps, `.plot()`. No torch import.
"""

from qdrift.stats.accuracy import per_step_accuracy
from qdrift.stats.compounding import compounding_test
from qdrift.stats.divergence import divergence_summary, divergence_vs_failure
from qdrift.stats.drift_trend import drift_trend
from qdrift.stats.hazard import cox, hazard_test, kaplan_meier, logrank
from qdrift.stats.horizon import half_horizon, step_error_ratio, success_by_horizon
from qdrift.stats.multiple import adjust
from qdrift.stats.paired import paired_comparison, paired_from_rows
from qdrift.stats.power import mde_paired, mde_table, n_for_equivalence, power_paired
from qdrift.stats.readoff import survival_readoff
from qdrift.stats.result import Result
from qdrift.stats.step_power import mde_step_error_ratio, power_step_error_ratio, step_power_table

__all__ = ["Result", "adjust", "compounding_test", "cox", "divergence_summary", "divergence_vs_failure",
           "drift_trend",
           "half_horizon", "hazard_test", "kaplan_meier", "logrank", "mde_paired", "mde_table",
           "mde_step_error_ratio", "n_for_equivalence", "paired_comparison", "paired_from_rows", "per_step_accuracy",
           "power_paired", "power_step_error_ratio", "step_error_ratio", "step_power_table", "success_by_horizon",
           "survival_readoff"]
