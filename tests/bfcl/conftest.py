import importlib.util

import pytest

requires_bfcl = pytest.mark.skipif(
    importlib.util.find_spec("bfcl_eval") is None,
    reason='bfcl-eval is not installed: pip install --no-deps "bfcl-eval==2026.3.23" (see qdrift/bfcl/PROVENANCE.md)')
