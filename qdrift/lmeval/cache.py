"""Response-cache paths that carry the spec hash and the code, so two specs, or two versions of
qdrift's quantization code, never share cached answers.

lm-eval's `use_cache=PATH` wraps the model in `CachingLM`, whose keys are a hash of the request
alone (method name and arguments), stored in the file `PATH_rank<r>.db`. Nothing of the model goes
into the key: a run of spec B on a cache written by spec A would silently return A's answers, and
so would a run after an edit to qdrift's code. qdrift therefore makes the spec hash and the code's
fingerprint (`qdrift.code_fingerprint`, its first 12 hex digits) part of the file name (the key
space), and the qdrift model refuses a cache file whose name lacks its tag. The weights are not in
it: a cache path reused after retraining a model under the same name returns the old answers.
"""

from __future__ import annotations

import re
from pathlib import Path


def cache_tag(model_name: str, spec_hash: str) -> str:
    """`<model>.<key>`: the suffix that names one model+spec+code's cache file (`cache_key`)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model_name).strip("-") or "model"
    return f"{slug[-60:]}.{cache_key(spec_hash)}"


def cache_key(spec_hash: str) -> str:
    """`spec-<hash>.code-<12 hex>`: what a cache file's name must carry for this spec and this code."""
    from qdrift.code_fingerprint import running_code

    return f"spec-{spec_hash}.code-{running_code()[:12]}"


def tagged_cache_path(prefix: str | Path, model_name: str, spec_hash: str) -> str:
    """The `use_cache` prefix to hand lm-eval for this model and spec.

    A directory (an existing one, or a prefix ending in '/') gets the tag as its file name;
    any other prefix gets it appended after a dot.
    """
    prefix = str(prefix)
    tag = cache_tag(model_name, spec_hash)
    if prefix.endswith(("/", "\\")) or Path(prefix).is_dir():
        return str(Path(prefix) / tag)
    if cache_key(spec_hash) in Path(prefix).name:
        return prefix
    return f"{prefix}.{tag}"


def check_cache_file(filename: str | Path, spec_hash: str) -> None:
    """ValueError unless the cache file's name carries this spec's and this code's key (`cache_key`)."""
    key = cache_key(spec_hash)
    if key not in Path(filename).name:
        raise ValueError(
            f"response cache {str(filename)!r} does not carry this model's spec hash and this qdrift's code "
            f"({key!r}): lm-eval keys cached answers by request only, so another spec's or another code's "
            "answers could be returned. "
            "Run through qdrift.lmeval.evaluate / run_cell or `qdrift lmeval`, which tag the path, "
            "or use qdrift.lmeval.tagged_cache_path(prefix, model_name, spec_hash)"
        )
