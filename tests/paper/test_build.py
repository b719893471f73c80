"""`qdrift paper`: the sweeps run (and resume), every number comes from the store, the document builds."""

import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from qdrift.paper import build_paper, load_config
from qdrift.repo_paths import shared_data_dir
from qdrift.store import Store

PAPER = Path(__file__).resolve().parents[2] / "paper"
SPECS = ["baseline", "w4g128-a16-kv:16", "w16-a16-kv:fp8e4m3@static"]
SMALL_ORGANISM = """\
name: small
models: [organism]
specs: [baseline, w4g128-a16-kv:16, w16-a16-kv:fp8e4m3@static]
calibration: {env: pointer_chase, horizon: 2, samples: 2}
tasks:
  - kind: short_form
    runner: lmeval
    task: organism_keys_mc
    limit: 4
  - kind: short_form
    runner: lmeval
    task: organism_keys_gen
    limit: 3
  - env: pointer_chase
    horizons: [1, 3]
    seeds: 3
    drift: true
  - env: ledger
    knobs: {echo: 1}
    horizons: [1, 2]
    seeds: 2
  - env: dict_sum
    knobs: {vmax: 1, keyspace: 1000}
    horizons: [1, 3]
    seeds: 2
batch: 4
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The real template and labels, on a small organism sweep (no SmolLM2), built once."""
    root = tmp_path_factory.mktemp("paper")
    shutil.copy(PAPER / "paper.md.j2", root)
    (root / "sweeps").mkdir()
    (root / "sweeps" / "organism.yaml").write_text(SMALL_ORGANISM)
    text = (PAPER / "paper.yaml").read_text().replace("  - sweeps/smollm2.yaml\n", "")
    (root / "paper.yaml").write_text(text)
    build_paper(root, progress=False)
    return root


@pytest.mark.skipif(shared_data_dir() is None, reason="the paper's SmolLM2 sweep reads MMLU from the shared "
                    "benchmark data (../shared/data or $QDRIFT_SHARED_DATA), absent on this machine")
def test_the_paper_directory_names_its_sweeps_template_and_a_label_for_every_spec():
    from qdrift.sweep import load_sweep

    cfg = load_config(PAPER)
    assert [p.name for p in cfg.sweeps] == ["organism.yaml", "smollm2.yaml"]
    used = [set(load_sweep(path).specs) for path in cfg.sweeps]
    assert all(specs <= set(cfg.labels) for specs in used)  # every spec run has a label...
    assert set.union(*used) == set(cfg.labels)  # ...and every label names a spec some sweep runs
    assert (PAPER / "Makefile").read_text().count("$(QDRIFT) paper .") == 2


@pytest.mark.skipif(shared_data_dir() is None, reason="the GPU sweep's short-form tasks read MMLU and GSM8K from the "
                    "shared benchmark data (../shared/data or $QDRIFT_SHARED_DATA), absent on this machine")
def test_the_gpu_sweep_file_validates_once_its_model_directory_exists(tmp_path, monkeypatch):
    from qdrift.sweep import SweepError, load_sweep

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SweepError, match="models/Qwen2.5-7B-Instruct"):
        load_sweep(PAPER / "gpu" / "qwen7b.yaml")
    (tmp_path / "models" / "Qwen2.5-7B-Instruct").mkdir(parents=True)
    sweep = load_sweep(PAPER / "gpu" / "qwen7b.yaml")
    assert sweep.device == "cuda" and sweep.dtype == "bfloat16" and max(sweep.tasks[2].horizons) == 200
    assert set(sweep.specs) == set(load_sweep(PAPER / "sweeps" / "organism.yaml").specs)  # the organism's grid


def test_every_cell_ran_and_the_document_was_written(built):
    with Store(built / "runs" / "organism.sqlite") as store:
        cells = store.cells()
    assert len(cells) == 3 * (2 + 2 + 2 + 2) and all(c["status"] == "done" for c in cells)
    md = (built / "out" / "paper.md").read_text()
    html = (built / "out" / "paper.html").read_text()
    assert "<table>" in html and "<h1>Does quantization error compound" in html
    assert "Incomplete" not in md and "{{" not in md and "Not part of this build" in md
    from qdrift.code_fingerprint import code_fingerprint

    assert f"min of compute, qdrift code {code_fingerprint()[:12]})" in md  # which code measured it
    for png in re.findall(r"\]\(([^)]+\.png)\)", md):
        assert (built / "out" / png).stat().st_size > 1000, png


def success_row(md: str, label: str, section: str) -> list[str]:
    part = md.split(section, 1)[1]
    row = next(line for line in part.splitlines() if line.startswith(f"| {label} |"))
    return [c.strip() for c in row.strip("|").split("|")][1:]


def test_success_counts_in_the_paper_are_the_stores(built):
    md = (built / "out" / "paper.md").read_text()
    con = sqlite3.connect(built / "runs" / "organism.sqlite")
    data = con.execute("SELECT c.config, r.data FROM rows r JOIN cells c ON c.key = r.cell WHERE r.kind = 'episode'")
    import json

    counts: dict = {}
    for config, row in data:
        cfg, row = json.loads(config), json.loads(row)
        k = counts.setdefault((cfg["task"], cfg["spec"], cfg["horizon"]), [0, 0])
        k[0] += bool(row["success"])
        k[1] += 1
    labels = load_config(PAPER).labels
    for task, section in [("pointer_chase", "### 3.1 Pointer chasing"), ("dict_sum", "### 3.4 dict_sum")]:
        for spec in SPECS:
            expected = [f"{counts[(task, spec, h)][0]}/{counts[(task, spec, h)][1]}" for h in (1, 3)]
            assert success_row(md, labels[spec], section) == expected


def test_drift_in_the_paper_is_the_stores(built):
    md = (built / "out" / "paper.md").read_text()
    with Store(built / "runs" / "organism.sqlite") as store:
        drift = store.rows("drift")
    labels = load_config(PAPER).labels
    assert {r["config"] for r in drift} == set(SPECS[1:]) and {r["horizon"] for r in drift} == {1, 3}
    for spec in SPECS[1:]:
        own = [r for r in drift if r["config"] == spec]
        row = success_row(md, labels[spec], "### 3.2 Drift along the baseline's trajectories")
        assert row[0] == f"{len(own):,}"  # tokens
        mean = sum(r["kl"] for r in own) / len(own)
        assert float(row[1].split(" [")[0]) == pytest.approx(mean, rel=1e-3, abs=1e-6)
        assert int(row[2]) == sum(not r["top1_agree"] for r in own)
    assert "Mean KL(baseline || variant) per step" in md


def test_short_form_accuracy_in_the_paper_is_the_stores(built):
    md = (built / "out" / "paper.md").read_text()
    with Store(built / "runs" / "organism.sqlite") as store:
        items = [r for r in store.rows("item") if r["task"] == "organism_keys_mc" and r["config"] == "baseline"]
    acc = sum(float(r["correct"]) for r in items) / len(items)
    section = md.split("## 5 Short form against long horizon", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith("| baseline |"))
    assert row.split("|")[2].strip() == "4" and row.split("|")[3].strip() == f"{acc:.3f}"


def test_a_rebuild_without_running_reads_the_store_and_runs_nothing(built, capsys):
    before = (built / "runs" / "organism.sqlite").stat().st_mtime_ns
    build_paper(built, run=False, progress=False)
    assert (built / "runs" / "organism.sqlite").stat().st_mtime_ns == before
    assert "paper:" in capsys.readouterr().out


def test_an_unfinished_sweep_is_said_at_the_top(built, tmp_path):
    root = tmp_path / "p"
    shutil.copytree(built, root)
    with sqlite3.connect(root / "runs" / "organism.sqlite") as con:
        con.execute("DELETE FROM cells WHERE replace(config, ' ', '') LIKE '%\"horizon\":3,%'")
    build_paper(root, run=False, progress=False)
    head = (root / "out" / "paper.md").read_text().split("## Abstract")[0]
    assert "18 of 24 cells done" in head and "Incomplete" in head


def test_stores_measured_by_other_code_are_refused_unless_allowed_and_the_paper_names_the_codes(built, tmp_path):
    from qdrift.cli import main
    from qdrift.code_fingerprint import running_code

    root = tmp_path / "p"
    shutil.copytree(built, root)
    with sqlite3.connect(root / "runs" / "organism.sqlite") as con:  # one cell as if another qdrift measured it
        con.execute("UPDATE cells SET code = ?, finished = 0 WHERE key = (SELECT MIN(key) FROM cells)", ("e" * 64,))
    with pytest.raises(SystemExit, match="qdrift paper: .*sha256 eeeeeeeeeeeeeeee.*--allow-code-change"):
        main(["paper", str(root), "--quiet"])
    assert main(["paper", str(root), "--quiet", "--allow-code-change"]) == 0  # every cell done: nothing runs
    head = (root / "out" / "paper.md").read_text().split("## Abstract")[0]
    assert f"qdrift code eeeeeeeeeeee then {running_code()[:12]})" in head  # in the order each first finished a cell


def test_a_directory_without_paper_yaml_is_a_clear_error(tmp_path):
    from qdrift.cli import main

    with pytest.raises(SystemExit, match="paper.yaml not found.*title, sweeps, template, labels"):
        main(["paper", str(tmp_path), "--no-run"])


def test_rendering_without_a_store_refuses_and_keeps_the_built_paper(built, tmp_path):
    from qdrift.cli import main

    root = tmp_path / "p"
    shutil.copytree(built, root)
    (root / "runs" / "organism.sqlite").unlink()
    before = {p.name: p.read_bytes() for p in (root / "out").iterdir()}
    with pytest.raises(SystemExit, match=r"no store for 1 of the paper's sweeps: .*organism\.sqlite.*make -C paper"):
        main(["paper", str(root), "--no-run", "--quiet"])
    assert {p.name: p.read_bytes() for p in (root / "out").iterdir()} == before
