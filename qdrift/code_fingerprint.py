"""Which measuring code a sweep ran: a sha256 over qdrift's sources, its built-in environments and
its lm-eval task files, read as files (nothing is imported).

Why: cells are keyed by the qdrift version, which edits between releases leave as it is, so a store
resumed after a change to scoring, quantization or an environment would mix results of two codes
under one cell key, and report them as one. A sweep records this fingerprint in its store and
refuses to resume into results measured by other code (`qdrift.store.Store.check_code`), as it does
for model weights (`qdrift.models.fingerprint`). Hashing reads about 170 small files (some 30 ms).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import qdrift

PACKAGE = Path(qdrift.__file__).resolve().parent
# Every file the package ships but its prose and bytecode: modules, the shipped sweep, schemas, and
# any data file added later. The organism's weight folder is left to the model fingerprint, which
# every sweep of it checks already.
NOT_CODE_SUFFIXES = (".md", ".pyc", ".pyo")
SKIPPED = (PACKAGE / "organism" / "weights",)


def code_files() -> list[tuple[str, Path]]:
    """(name, path) of every file the fingerprint covers, sorted by name.

    qdrift's own sources; the built-in environments (`agents/*.py`, where the package finds them);
    every file of the lm-eval task folder in use (`evals/`, or $QDRIFT_EVALS), when there is one;
    neither prose (Markdown) nor bytecode."""
    from qdrift.envs.registry import agents_dir

    found = [(f"qdrift/{p.relative_to(PACKAGE).as_posix()}", p) for p in PACKAGE.rglob("*")
             if p.is_file() and _is_code(p) and not any(p.is_relative_to(s) for s in SKIPPED)]
    agents = agents_dir()
    if agents.is_dir():
        found += [(f"agents/{p.name}", p) for p in agents.glob("*.py")]
    evals = _evals_folder()
    if evals is not None:
        found += [(f"evals/{p.relative_to(evals).as_posix()}", p) for p in evals.rglob("*")
                  if p.is_file() and _is_code(p)]
    return sorted(found)


def _is_code(path: Path) -> bool:
    return path.suffix not in NOT_CODE_SUFFIXES and "__pycache__" not in path.parts


def _evals_folder() -> Path | None:
    from qdrift.repo_paths import evals_dir

    try:
        return evals_dir()
    except FileNotFoundError:  # an install without the repository's evals/: no task files to hash
        return None


def code_fingerprint() -> str:
    """sha256 over the covered files' names and contents (`code_files`), read afresh on every call."""
    digest = hashlib.sha256()
    for name, path in code_files():
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()
