"""Every notebook runs top to bottom on the embedded default (so none can rot), with nbclient."""

from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_the_four_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01_quantize.ipynb", "02_shortform.ipynb", "03_agents.ipynb",
                                           "04_replay_card.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    book = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), "outputs are stripped in git"
    nbclient.NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert any(c.outputs for c in book.cells if c.cell_type == "code"), "the notebook printed nothing"
