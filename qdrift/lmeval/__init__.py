"""lm-eval integration: the registered `qdrift` model, offline task configs, tidy per-item rows.

Importing this package registers the `qdrift` model with lm-eval (lm-eval 0.4 discovers no
third-party models by itself; `qdrift lmeval ...` imports this, then runs lm-eval's CLI).

    rows = run_cell(model, tokenizer, "mmlu_local_anatomy", "w4g32-a16-kv:16", limit=20)
    compare_short_form(base_rows, rows).summary()
"""

from qdrift.lmeval.cache import tagged_cache_path
from qdrift.lmeval.compare import compare_short_form
from qdrift.lmeval.model import QdriftLM
from qdrift.lmeval.rows import rows_from_results, rows_from_samples
from qdrift.lmeval.run import ShortFormRun, evaluate, run_cell
from qdrift.lmeval.tasks import evals_dir, gsm8k_task, mmlu_tasks, shared_data_dir, standard_task

__all__ = ["QdriftLM", "ShortFormRun", "compare_short_form", "evals_dir", "evaluate", "gsm8k_task", "mmlu_tasks",
           "rows_from_results", "rows_from_samples", "run_cell", "shared_data_dir", "standard_task",
           "tagged_cache_path"]
