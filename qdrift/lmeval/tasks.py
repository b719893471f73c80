"""Task configs for offline runs: qdrift's own YAML in `evals/`, local GSM8K/MMLU, lm-eval's standard tasks.

lm-eval resolves a relative `data_files` path against the current directory, not the YAML's, so
the YAML in `evals/` writes paths relative to the repository root (where `lm_eval --include_path
evals/...` is run) and the helpers here load it as a dict with absolute paths, which runs from
anywhere. Loading qdrift's tasks never builds lm-eval's full task index (~5 s); only a standard
task name (arc_easy, hellaswag, mmlu_pro, ...) does, once per process.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

from qdrift.repo_paths import DATA_ENV, EVALS_ENV, REPO, evals_dir, shared_data_dir  # noqa: F401 - re-exported

MMLU_DESCRIPTION = "The following are multiple choice questions (with answers) about {}.\n\n"


def _require_data(name: str, data_dir: Path | str | None) -> Path:
    path = Path(data_dir) if data_dir is not None else shared_data_dir()
    if path is None or not (path / name).is_dir():
        raise FileNotFoundError(
            f"no {name}/ under {path or REPO.parent / 'shared' / 'data'}: set ${DATA_ENV} to the shared "
            f"benchmark data, or use lm-eval's standard task (needs the hub)"
        )
    return path


def _absolute(cfg: dict[str, Any], root: Path, data_root: Path | None = None) -> dict[str, Any]:
    """`cfg` with its relative data_files made absolute (../shared/data/... -> data_root/...)."""
    files = cfg.get("dataset_kwargs", {}).get("data_files")
    if not files:
        return cfg

    def fix(p: str) -> str:
        if data_root is not None and p.startswith("../shared/data/"):
            return str(data_root / p[len("../shared/data/"):])
        return p if Path(p).is_absolute() else str(root / p)

    cfg["dataset_kwargs"]["data_files"] = {
        split: [fix(p) for p in v] if isinstance(v, list) else fix(v) for split, v in files.items()
    }
    return cfg


def load_task_yaml(path: Path | str, data_dir: Path | str | None = None) -> dict[str, Any]:
    """A task YAML of `evals/` as a config dict with absolute data paths."""
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(Path(path), resolve_func=True)
    return _absolute(cfg, REPO, Path(data_dir) if data_dir is not None else shared_data_dir())


@lru_cache(maxsize=1)
def own_tasks() -> dict[str, Path]:
    """{task name: YAML path} for every task YAML under evals/ (read without lm-eval's index)."""
    import yaml

    found = {}
    for path in sorted(evals_dir().rglob("*.yaml")):
        with path.open(encoding="utf-8") as f:
            head = yaml.safe_load(f)
        if isinstance(head, dict) and isinstance(head.get("task"), str):
            found[head["task"]] = path
    return found


def gsm8k_task(data_dir: Path | str | None = None, num_fewshot: int | None = None) -> dict[str, Any]:
    """lm-eval's gsm8k on the local copy (5-shot like lm-eval unless `num_fewshot`)."""
    root = _require_data("gsm8k", data_dir)
    cfg = load_task_yaml(own_tasks()["gsm8k_local"], root)
    if num_fewshot is not None:
        cfg["num_fewshot"] = num_fewshot
    return cfg


def mmlu_subjects(data_dir: Path | str | None = None) -> list[str]:
    root = _require_data("mmlu", data_dir)
    return sorted(p.name[: -len("_test.csv")] for p in (root / "mmlu" / "test").glob("*_test.csv"))


def mmlu_tasks(subjects: list[str] | None = None, data_dir: Path | str | None = None) -> list[dict[str, Any]]:
    """One task per MMLU subject, `mmlu_local_<subject>`, as lm-eval's mmlu_<subject> on the local CSVs."""
    from datasets import Features, Value

    root = _require_data("mmlu", data_dir)
    valid = mmlu_subjects(root)
    subjects = valid if subjects is None else list(subjects)
    bad = [s for s in subjects if s not in valid]
    if bad:
        from qdrift.spec.model import did_you_mean

        raise ValueError(f"unknown MMLU subject {bad[0]!r}.{did_you_mean(bad[0], valid)} Valid: {', '.join(valid)}")
    base = load_task_yaml(own_tasks()["mmlu_local"], root)
    columns = base["dataset_kwargs"]["column_names"]
    out = []
    for s in subjects:
        cfg = copy.deepcopy(base)
        cfg["task"] = f"mmlu_local_{s}"
        cfg["description"] = MMLU_DESCRIPTION.format(s.replace("_", " "))
        kw = cfg["dataset_kwargs"]
        kw["data_files"] = {"test": str(root / "mmlu" / "test" / f"{s}_test.csv"),
                            "dev": str(root / "mmlu" / "dev" / f"{s}_dev.csv")}
        kw["features"] = Features({c: Value("string") for c in columns})  # numeric answers stay text
        out.append(cfg)
    return out


@lru_cache(maxsize=1)
def _standard_manager():
    from lm_eval.tasks import TaskManager

    return TaskManager()


def standard_task(name: str, **overrides: Any) -> dict[str, Any]:
    """lm-eval's own config of task `name` (e.g. arc_easy) as a dict, with `overrides` applied.

    Overrides let a test or an offline mirror swap the data source (`dataset_path="json"`,
    `dataset_kwargs={"data_files": ...}`, `dataset_name=None`) while keeping the standard prompt,
    choices and metrics.
    """
    from lm_eval.tasks._yaml_loader import load_yaml

    index = _standard_manager().task_index
    entry = index.get(name)
    if entry is None or entry.yaml_path is None:
        from qdrift.spec.model import did_you_mean

        raise ValueError(f"no standard lm-eval task {name!r}.{did_you_mean(name, index)}")
    cfg = load_yaml(entry.yaml_path, resolve_func=True)
    for key in ("tag", "group"):
        cfg.pop(key, None)
    cfg.update(overrides)
    return {k: v for k, v in cfg.items() if v is not None}


def resolve_tasks(tasks: list[str | dict[str, Any]], data_dir: Path | str | None = None):
    """(task specs for lm-eval, whether lm-eval's standard index is needed) for names and dicts.

    Names: qdrift's tasks in evals/ (organism_keys_mc, ...), gsm8k_local, mmlu_local (all
    subjects in one task), mmlu_local_<subject>; any other name goes to lm-eval's standard tasks.
    """
    specs: list[str | dict[str, Any]] = []
    standard = False
    own = own_tasks()
    for t in tasks:
        if isinstance(t, dict):
            specs.append(t)
        elif t == "gsm8k_local":
            specs.append(gsm8k_task(data_dir))
        elif t.startswith("mmlu_local_"):
            specs.extend(mmlu_tasks([t[len("mmlu_local_"):]], data_dir))
        elif t in own:
            root = _require_data("mmlu", data_dir) if t == "mmlu_local" else None
            specs.append(load_task_yaml(own[t], root))
        elif isinstance(t, str):
            specs.append(t)
            standard = True
        else:
            raise TypeError(f"task must be a name or a config dict, got {type(t).__name__}")
    return specs, standard
