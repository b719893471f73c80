"""Response-cache paths that carry the model's key, the spec hash and the code, so two models, two
dtypes or options, two specs, or two versions of qdrift's quantization code never share cached answers.

lm-eval's `use_cache=PATH` wraps the model in `CachingLM`, whose keys are a hash of the request
alone (method name and arguments), stored in the file `PATH_rank<r>.db`. Nothing of the model goes
into the key: a run of spec B on a cache written by spec A would silently return A's answers, and
so would a run of another model, of the same model in another dtype, or a run after an edit to
qdrift's code. qdrift therefore makes `model-<key>.spec-<hash>.code-<12 hex>` part of the file name
(the key space): the model key hashes the weights, tokenizer, static scales and every option that
changes an answer (`qdrift.lmeval.identity`), the spec hash the spec, and the code part
`qdrift.code_fingerprint`. The qdrift model refuses a cache file whose name lacks its key, and
refuses a cache at all when its weights or tokenizer cannot be fingerprinted.
"""

from __future__ import annotations

import re
from pathlib import Path


def cache_tag(model_name: str, model_key: str, spec_hash: str) -> str:
    """`<model>.<key>`: the name of one model+options+spec+code's cache file (`cache_key`)."""
    return f"{_slug(model_name)}.{cache_key(model_key, spec_hash)}"


def _slug(model_name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model_name).strip("-") or "model"
    return slug[-60:]


def cache_key(model_key: str, spec_hash: str) -> str:
    """`model-<key>.spec-<hash>.code-<12 hex>`: what a cache file's name must carry."""
    from qdrift.code_fingerprint import running_code

    return f"model-{model_key}.spec-{spec_hash}.code-{running_code()[:12]}"


def tagged_cache_path(prefix: str | Path, model_name: str, key: str) -> str:
    """The `use_cache` prefix to hand lm-eval for a model: `key` is its `cache_key` (`QdriftLM.cache_key`).

    A directory (an existing one, or a prefix ending in '/') gets `<model>.<key>` as its file name;
    a prefix that already carries the key is kept; any other prefix gets it appended after a dot.
    """
    if not re.fullmatch(r"model-[0-9a-f]+\.spec-[^.]+\.code-[0-9a-f]+", key):
        raise ValueError(f"key {key!r} is not a cache key (model-<hex>.spec-<hash>.code-<hex>): "
                         "pass the model's QdriftLM.cache_key")
    prefix = str(prefix)
    tag = f"{_slug(model_name)}.{key}"
    if prefix.endswith(("/", "\\")) or Path(prefix).is_dir():
        return str(Path(prefix) / tag)
    if key in Path(prefix).name:
        return prefix
    return f"{prefix}.{tag}"


def check_cache_file(filename: str | Path, key: str) -> None:
    """ValueError unless the cache file's name carries this model's `cache_key`."""
    if key not in Path(filename).name:
        raise ValueError(
            f"response cache {str(filename)!r} does not carry this model's key ({key!r}: weights, tokenizer and "
            "options, spec hash, qdrift's code): lm-eval keys cached answers by request only, so another model's, "
            "dtype's, spec's or code's answers could be returned. "
            "Run through qdrift.lmeval.evaluate / run_cell or `qdrift lmeval`, which tag the path, "
            "or use qdrift.lmeval.tagged_cache_path(prefix, lm.base_name, lm.cache_key)"
        )
