"""The repository folders qdrift reads beside its package: the built-in environments, lm-eval task
files and the offline data.

Kept free of heavy imports (torch, lm-eval), so that fingerprinting the measuring code
(`qdrift.code_fingerprint`) can find the task folder without loading either.
"""

from __future__ import annotations

import os
from pathlib import Path

import qdrift

REPO = Path(qdrift.__file__).resolve().parents[1]
EVALS_ENV, DATA_ENV = "QDRIFT_EVALS", "QDRIFT_SHARED_DATA"


def evals_dir() -> Path:
    """The `evals/` folder ($QDRIFT_EVALS, else beside the qdrift package in a checkout)."""
    path = Path(os.environ.get(EVALS_ENV, REPO / "evals"))
    if not path.is_dir():
        raise FileNotFoundError(f"no evals folder at {path}: set ${EVALS_ENV} to the repository's evals/ folder")
    return path


def shared_data_dir() -> Path | None:
    """The offline benchmark data ($QDRIFT_SHARED_DATA, else ../shared/data beside the checkout), or None."""
    path = Path(os.environ.get(DATA_ENV, REPO.parent / "shared" / "data"))
    return path if path.is_dir() else None


def agents_dir() -> Path:
    """The repository's top-level `agents/` folder, located from qdrift's install location."""
    return REPO / "agents"
