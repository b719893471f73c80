"""Find environments by name or by path, and the split between training and held-out seeds.

    load_environment("ledger")                       # built-in: <repo>/agents/ledger.py, class Ledger
    load_environment("path/to/my_env.py@MyEnv")      # a user's own environment file, no edit to qdrift
    make_environment("ledger", horizon=50, seed=3)   # an instance

Built-in environments live in the repository's top-level `agents/` folder (not a Python package),
found next to the installed `qdrift` package: `Path(qdrift.__file__).resolve().parents[1] / "agents"`.

Seeds: `seed < TRAIN_SEEDS_BELOW` (1_000_000) are training seeds; `seed >= TRAIN_SEEDS_BELOW`
are held out for evaluation. `make_environment(..., split="train")` refuses a held-out seed and
`split="eval"` a training seed, so a sweep cannot mix them up by accident.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from qdrift.repo_paths import agents_dir

TRAIN_SEEDS_BELOW = 1_000_000
# Training seeds from here up are kept for calibrating an environment's difficulty to a model
# (qdrift.envs.calibrate); fine-tuning data (qdrift.finetune) draws only below it.
DEV_SEEDS_FROM = 900_000

BUILTIN: dict[str, tuple[str, str]] = {
    "pointer_chase": ("pointer_chase.py", "PointerChase"),
    "ledger": ("ledger.py", "Ledger"),
    "graph_nav": ("graph_nav.py", "GraphNav"),
    "file_system": ("file_system.py", "FileSystem"),
    "dict_sum": ("dict_sum.py", "DictSum"),
}
# Loadable by name too, but not built-ins (which every test and the organism's evaluation run):
# they need an optional package (bfcl_multi_turn: bfcl-eval, see qdrift/bfcl/PROVENANCE.md).
OPTIONAL: dict[str, tuple[str, str]] = {
    "bfcl_multi_turn": ("bfcl_multi_turn.py", "BFCLMultiTurn"),
}

_REQUIRED = ("tools", "reset", "oracle", "step", "success")
_cache: dict[tuple[str, int], Any] = {}


def is_heldout(seed: int) -> bool:
    """Whether `seed` is a held-out evaluation seed (>= TRAIN_SEEDS_BELOW) rather than a training seed."""
    return seed >= TRAIN_SEEDS_BELOW


def check_split(seed: int, split: str | None) -> None:
    """ValueError when `seed` does not belong to `split` ("train", "eval", or None for either)."""
    if split is None:
        return
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train', 'eval' or None, got {split!r}")
    if split == "train" and is_heldout(seed):
        raise ValueError(f"seed {seed} is a held-out evaluation seed; training seeds are 0..{TRAIN_SEEDS_BELOW - 1}")
    if split == "eval" and not is_heldout(seed):
        raise ValueError(f"seed {seed} is a training seed; held-out evaluation seeds are >= {TRAIN_SEEDS_BELOW}")


def available() -> list[str]:
    return sorted(BUILTIN)


def _load_module(path: Path):
    path = path.resolve()
    mtime = path.stat().st_mtime_ns
    key = (str(path), mtime)
    if key in _cache:
        return _cache[key]
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    mod_name = f"qdrift_envs_user_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load environment file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(mod_name, None)
        raise
    _cache[key] = module
    return module


def _load_class(path: Path, class_name: str, ref: str):
    if not path.is_file():
        raise FileNotFoundError(f"environment file not found: {path} (from {ref!r})")
    module = _load_module(path)
    cls = getattr(module, class_name, None)
    if cls is None or not isinstance(cls, type):
        classes = sorted(k for k, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__)
        raise ValueError(f"no class '{class_name}' in {path}; classes defined there: {', '.join(classes) or 'none'}")
    missing = [m for m in _REQUIRED if not callable(getattr(cls, m, None))]
    if missing:
        raise TypeError(f"{class_name} in {path} is not an environment: missing method(s) {', '.join(missing)}")
    return cls


def path_source_sha256(ref: str) -> str | None:
    """sha256 of a path environment's file (`path.py@Class`), None for a built-in name.

    Sweep cells carry it, so editing a custom environment re-runs its cells instead of resuming
    results measured on the old code (built-in environments change with qdrift's version, which
    every cell already carries)."""
    if not isinstance(ref, str) or "@" not in ref:
        return None
    path, _ = _path_ref(ref)
    if not path.is_file():
        raise FileNotFoundError(f"environment file not found: {path} (from {ref!r})")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _path_ref(ref: str) -> tuple[Path, str]:
    """(file, class name) of a `path/to/file.py@ClassName` reference."""
    file_part, _, class_name = ref.rpartition("@")
    if not file_part or not class_name:
        raise ValueError(f"path reference must look like 'path/to/file.py@ClassName', got {ref!r}")
    return Path(file_part).expanduser(), class_name


def load_environment(ref: str):
    """The environment class for `ref`: a built-in name or `path/to/file.py@ClassName`."""
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"environment reference must be a name or 'path.py@Class', got {ref!r}")
    if "@" in ref:
        return _load_class(*_path_ref(ref), ref)
    named = {**BUILTIN, **OPTIONAL}
    if ref not in named:
        close = difflib.get_close_matches(ref, named, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"Unknown environment '{ref}'.{hint} Available: {', '.join(available() + sorted(OPTIONAL))}")
    folder = agents_dir()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"built-in environments live in the repository's agents/ folder, expected at {folder}, which does not "
            "exist (qdrift installed without its repository?); use a path reference 'path/to/file.py@ClassName'")
    file_name, class_name = named[ref]
    return _load_class(folder / file_name, class_name, ref)


def repeated_instance(ref: str, cls, seeds: list[int], knobs: dict) -> str | None:
    """For an environment drawn from a finite set of instances (one whose `instance_key(seed, **knobs)`
    classmethod names the instance a seed plays, as BFCL's entries), what is wrong with `seeds` that
    give an instance twice, else None: the statistics take every seed for an independent instance,
    so a repeat would count one item twice."""
    if not hasattr(cls, "instance_key"):
        return None
    first: dict = {}
    for seed in seeds:
        key = cls.instance_key(seed=seed, **knobs)
        if key in first:
            return (f"seeds {first[key]} and {seed} give the same {ref} instance ({key}); {len(first)} seeds "
                    f"give distinct ones here, so ask for at most {len(first)} (or a list of seeds that differ)")
        first[key] = seed
    return None


def make_environment(ref: str, horizon: int, seed: int, *, split: str | None = None, **knobs: Any):
    """An instance of environment `ref`; `split` ("train"/"eval") enforces the seed split."""
    if isinstance(seed, int) and not isinstance(seed, bool):
        check_split(seed, split)
    cls = load_environment(ref)
    if split == "train" and getattr(cls, "eval_only", False):
        raise ValueError(f"{ref} has no training split (every instance is evaluation data); use split='eval' or None")
    return cls(horizon, seed, **knobs)


def parse_env_entry(entry: str) -> tuple[str, dict[str, int]]:
    """`ledger:echo=1,amax=50` -> ("ledger", {"echo": 1, "amax": 50}); a bare name has no knobs."""
    name, _, rest = entry.partition(":")
    knobs = {}
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq or not value.lstrip("-").isdigit():
            raise ValueError(f"bad environment entry {entry!r}: knobs are written name:key=INT,key=INT")
        knobs[key] = int(value)
    return name, knobs
