"""Lower layers never import higher ones: the spec needs no torch, the formats need no transformers."""

import subprocess
import sys

import pytest


def imported_after(module: str) -> set[str]:
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in out.split()}


@pytest.mark.parametrize(
    "module, forbidden",
    [
        ("qdrift", {"torch", "transformers"}),
        ("qdrift.spec", {"torch", "transformers"}),
        ("qdrift.formats", {"transformers"}),
        ("qdrift.capacity", {"transformers"}),
        ("qdrift.stats", {"torch", "transformers", "matplotlib"}),
        ("qdrift.store", {"torch", "transformers", "pandas"}),
        ("qdrift.models.fingerprint", {"torch", "transformers"}),
        ("qdrift.sweep", {"torch", "transformers"}),
        ("qdrift.verify.run", {"torch", "transformers", "matplotlib"}),
        ("qdrift.report.card", {"torch", "transformers", "matplotlib"}),
        ("qdrift.paper", {"torch", "transformers", "matplotlib"}),
    ],
)
def test_module_does_not_pull_in_heavier_layers(module, forbidden):
    assert not imported_after(module) & forbidden
