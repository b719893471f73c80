"""Which measuring code a sweep ran: a sha256 over qdrift's sources, its built-in environments and
its lm-eval task files, read as files (nothing is imported).

Why: cells are keyed by the qdrift version, which edits between releases leave as it is, so a store
resumed after a change to scoring, quantization or an environment would mix results of two codes
in one store, and report them as one. A sweep records this fingerprint with every cell it measures
and refuses to resume a store holding results of other code (`qdrift.store.Store.check_code`), as
it does for model weights (`qdrift.models.fingerprint`). Hashing reads about 170 small files (some 30 ms).
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path

import qdrift
from qdrift.repo_paths import EVALS_ENV, REPO, agents_dir

PACKAGE = Path(qdrift.__file__).resolve().parent
# Every file the package ships but its prose and bytecode: modules, the shipped sweep, schemas, and
# any data file added later. The organism's weight folder is left to the model fingerprint, which
# every sweep of it checks already.
NOT_CODE_SUFFIXES = (".md", ".pyc", ".pyo")
SKIPPED = (PACKAGE / "organism" / "weights",)


def code_files() -> list[tuple[str, Path]]:
    """(name, path) of every file the fingerprint covers, sorted by name.

    qdrift's own sources; the built-in environments (`agents/*.py`, where the package finds them); the
    lm-eval task folder in use ($QDRIFT_EVALS, else `evals/`) and the checkout's `evals/`, against
    which task files name their data; neither prose (Markdown), bytecode nor hidden files."""
    found = [(f"qdrift/{p.relative_to(PACKAGE).as_posix()}", p) for p in PACKAGE.rglob("*")
             if p.is_file() and _is_code(p) and not any(p.is_relative_to(s) for s in SKIPPED)]
    agents = agents_dir()
    if agents.is_dir():
        found += [(f"agents/{p.name}", p) for p in agents.glob("*.py")]
    task_folders = {"evals": REPO / "evals"}
    if os.environ.get(EVALS_ENV) and Path(os.environ[EVALS_ENV]).resolve() != (REPO / "evals").resolve():
        task_folders[f"${EVALS_ENV}"] = Path(os.environ[EVALS_ENV])
    for label, folder in task_folders.items():
        if folder.is_dir():  # an install without the repository's evals/ has no task files to hash
            found += [(f"{label}/{p.relative_to(folder).as_posix()}", p) for p in folder.rglob("*")
                      if p.is_file() and _is_code(p)]
    return sorted(found)


def _is_code(path: Path) -> bool:
    # Hidden files and editors' droppings (vim's .swp, backups ending in ~) are not code either: an
    # open editor must not change the fingerprint of a running sweep.
    return (path.suffix not in NOT_CODE_SUFFIXES and "__pycache__" not in path.parts
            and not path.name.startswith(".") and not path.name.endswith("~"))


def code_fingerprint() -> str:
    """sha256 over the covered files' names and contents (`code_files`), read afresh on every call."""
    digest = hashlib.sha256()
    for name, path in code_files():
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def running_code() -> str:
    """`code_fingerprint()` as this process first read it (when it imported `qdrift.sweep.execute`):
    what a sweep records with each cell it measures. A cell after which the files differ from it fails
    (`qdrift.sweep.execute.run_cell`), as modules it imported meanwhile may be either code's."""
    return code_fingerprint()
