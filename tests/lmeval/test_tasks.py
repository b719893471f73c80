"""Task configs: qdrift's own tasks in evals/, local GSM8K/MMLU, and lm-eval's standard tasks."""

import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'qdrift[lmeval]')")

from qdrift.lmeval import run_cell, shared_data_dir, standard_task  # noqa: E402
from qdrift.lmeval.tasks import evals_dir, load_task_yaml, mmlu_tasks, own_tasks  # noqa: E402

HERE = Path(__file__).parent
NO_DATA = "the shared benchmark data (../shared/data or $QDRIFT_SHARED_DATA) is absent on this machine"
needs_data = pytest.mark.skipif(shared_data_dir() is None, reason=NO_DATA)


def test_evals_is_a_folder_of_definitions_not_a_package():
    assert not (evals_dir() / "__init__.py").exists()
    assert {"organism_keys_mc", "organism_keys_gen", "gsm8k_local", "mmlu_local"} <= set(own_tasks())


def test_own_task_yaml_loads_with_absolute_data_paths():
    cfg = load_task_yaml(own_tasks()["organism_keys_mc"])
    path = Path(cfg["dataset_kwargs"]["data_files"]["test"])
    assert path.is_absolute() and path.is_file()
    items = [json.loads(line) for line in path.open()]
    assert len(items) == 24 and all(0 <= it["gold"] < len(it["choices"]) == 4 for it in items)
    assert all(it["seed"] >= 1_000_000 for it in items)  # held-out seeds only


@needs_data
def test_unknown_mmlu_subject_names_the_valid_ones():
    with pytest.raises(ValueError, match="Did you mean 'anatomy'"):
        mmlu_tasks(["anatomyy"])


@needs_data
def test_mmlu_subset_runs_end_to_end_offline(tiny):
    rows = run_cell(*tiny, ["mmlu_local_anatomy", "mmlu_local_astronomy"], None, limit=2, name="tiny")
    assert [(r["task"], r["doc_id"]) for r in rows] == [
        ("mmlu_local_anatomy", 0), ("mmlu_local_anatomy", 1), ("mmlu_local_astronomy", 0), ("mmlu_local_astronomy", 1)]
    assert all(len(r["choice_loglik"]) == 4 and r["gold"] in range(4) for r in rows)


@needs_data
def test_gsm8k_subset_runs_end_to_end_offline(tiny):
    rows = run_cell(*tiny, "gsm8k_local", None, limit=2, name="tiny", num_fewshot=0,
                    gen_kwargs={"max_gen_toks": 8})
    assert sorted({r["filter"] for r in rows}) == ["flexible-extract", "strict-match"]
    assert len(rows) == 4 and all(r["kv_exercised"] and r["correct"] in (0.0, 1.0) for r in rows)


def test_standard_arc_config_runs_on_a_local_stand_in(tiny):
    cfg = standard_task("arc_easy", task="arc_standin", dataset_path="json", dataset_name=None,
                        dataset_kwargs={"data_files": {"test": str(HERE / "data" / "arc_standin.jsonl")}},
                        training_split=None, validation_split=None)
    assert cfg["doc_to_choice"] == "{{choices.text}}"  # lm-eval's own prompt and choices
    rows = run_cell(*tiny, cfg, None, name="tiny")
    assert [r["gold"] for r in rows] == [1, 0, 2]
    assert [len(r["choice_loglik"]) for r in rows] == [4, 4, 3]


def test_unknown_standard_task_is_an_error():
    with pytest.raises(ValueError, match="no standard lm-eval task 'arc_eassy'"):
        standard_task("arc_eassy")
