"""The lmeval runner plugs into sweeps: a short-form cell on the organism task gives paired item rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from qdrift.sweep.file import ShortFormTask
from qdrift.sweep.shortform import check_items, lookup

EVALS = Path(__file__).resolve().parents[2] / "evals"


def test_lmeval_runner_is_registered_and_returns_items():
    runner = lookup("lmeval")
    from qdrift.organism import load_organism

    model, tok = load_organism()
    if not (EVALS / "organism").is_dir():
        pytest.skip("evals/ is not beside the package (installed wheel)")
    rows = check_items("lmeval", runner(model, tok, ShortFormTask("lmeval", "organism_keys_mc", limit=3)))
    assert len(rows) == 3
    assert len({r["item"] for r in rows}) == 3
    assert all(r["item"].startswith("organism_keys_mc/") for r in rows)
    # the store's `model` column stays the sweep's model name; lm-eval's path is kept beside it
    assert all("model" not in r and r["model_path"] for r in rows)
