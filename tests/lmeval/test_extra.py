"""The `lmeval` extra installs everything lm-eval's HF model imports (accelerate was missing)."""

import ast
import importlib.metadata as md
import importlib.util
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with tomllib (Python 3.11+)")

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """The installed distributions `names` bring, transitively (their extras left out)."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [_name(r) for r in requires if "extra ==" not in r]
    return seen


def test_the_lmeval_extra_brings_every_package_lm_evals_hf_model_imports():
    if not PYPROJECT.is_file():
        pytest.skip("needs the project's pyproject.toml (a checkout)")
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    brought = _closure({_name(r) for r in project["dependencies"] + project["optional-dependencies"]["lmeval"]})
    source = Path(importlib.util.find_spec("lm_eval.models.huggingface").origin).read_text()
    modules = set()
    for node in ast.parse(source).body:  # top-level imports: the ones that fail at import time
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    dists = md.packages_distributions()
    missing = sorted(m for m in modules - set(sys.stdlib_module_names) - {"lm_eval"}
                     if not any(_name(d) in brought for d in dists.get(m, [m])))
    assert "accelerate" in modules  # what this test is about: lm-eval imports it at the top of the HF model
    assert missing == [], f"lm-eval's HF model imports {missing}, which the lmeval extra does not install"
