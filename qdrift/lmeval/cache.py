"""Response-cache paths that carry the spec hash, so two specs never share cached answers.

lm-eval's `use_cache=PATH` wraps the model in `CachingLM`, whose keys are a hash of the request
alone (method name and arguments), stored in the file `PATH_rank<r>.db`. Nothing of the model goes
into the key: a run of spec B on a cache written by spec A would silently return A's answers. qdrift
therefore makes the spec hash part of the file name (the key space), and the qdrift model refuses
a cache file whose name lacks its tag.
"""

from __future__ import annotations

import re
from pathlib import Path


def cache_tag(model_name: str, spec_hash: str) -> str:
    """`<model>.spec-<hash>`: the suffix that names one model+spec's cache file."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model_name).strip("-") or "model"
    return f"{slug[-60:]}.spec-{spec_hash}"


def tagged_cache_path(prefix: str | Path, model_name: str, spec_hash: str) -> str:
    """The `use_cache` prefix to hand lm-eval for this model and spec.

    A directory (an existing one, or a prefix ending in '/') gets the tag as its file name;
    any other prefix gets it appended after a dot.
    """
    prefix = str(prefix)
    tag = cache_tag(model_name, spec_hash)
    if prefix.endswith(("/", "\\")) or Path(prefix).is_dir():
        return str(Path(prefix) / tag)
    if f"spec-{spec_hash}" in Path(prefix).name:
        return prefix
    return f"{prefix}.{tag}"


def check_cache_file(filename: str | Path, spec_hash: str) -> None:
    """ValueError unless the cache file's name carries `spec-<spec_hash>`."""
    if f"spec-{spec_hash}" not in Path(filename).name:
        raise ValueError(
            f"response cache {str(filename)!r} does not carry this model's spec hash ('spec-{spec_hash}'): "
            "lm-eval keys cached answers by request only, so another spec's answers could be returned. "
            "Run through qdrift.lmeval.evaluate / run_cell or `qdrift lmeval`, which tag the path, "
            "or use qdrift.lmeval.tagged_cache_path(prefix, model_name, spec_hash)"
        )
