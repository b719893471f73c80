"""Attention masks measured in each row's real tokens, for batches of models with sliding-window layers.

transformers draws a sliding window by column (`kv_idx > q_idx - window`) and its sliding cache
layers keep the last `window - 1` columns. In a batched session padding takes columns, so a padded
row's window, counted in columns, holds fewer of its own tokens than the row alone would see. Here
the session keeps every column (full cache layers) and gives the model ready masks in which a key is
visible to a query when it is one of the row's real tokens, not after the query, and within the
window in the row's own positions. transformers' mask builders (`ALL_MASK_ATTENTION_FUNCTIONS`)
turn that rule into the attention implementation's format; only the rule is written here, since
no transformers mask counts positions per row.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers.cache_utils import get_layer_types_and_kwargs
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

# The attention kinds these masks reproduce: every other kind keeps transformers' own masks.
KINDS = ("full_attention", "sliding_attention")
IMPLEMENTATIONS = ("sdpa", "eager")


def sliding_kinds(model) -> dict[str, int | None] | None:
    """{attention kind: window or None} of the model's layers when some see a window (sliding, chunked,
    hybrid), else None."""
    config = model.config.get_text_config(decoder=True)
    types, kwargs = get_layer_types_and_kwargs(config)
    kinds: dict[str, int | None] = {}
    for kind, kw in zip(types, kwargs, strict=True):
        if kind == "dummy":
            continue
        window = kw.get("sliding_window")
        if kinds.setdefault(kind, window) != window:  # one mask per kind cannot hold two windows
            kinds[f"{kind} with windows of several widths"] = window
    return kinds if any(kinds.values()) else None


def takes_masks_by_kind(model) -> bool:
    """Whether the model's forward takes a dict of ready masks by attention kind.

    transformers' models that mix kinds read one with `isinstance(causal_mask_mapping := attention_mask,
    dict)`; there is no flag to ask, so the decoder's source is read for it.
    """
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    return _forward_reads_mask_mapping(type(decoder))


@functools.cache
def _forward_reads_mask_mapping(decoder_class: type) -> bool:
    """Read once per decoder class: every session of a model would read the same source."""
    try:
        return "causal_mask_mapping" in inspect.getsource(decoder_class.forward)
    except (OSError, TypeError):
        return False


def unsupported(model, kinds: dict[str, int | None]) -> str | None:
    """Why per-row masks cannot stand in for this model's own, or None when they can."""
    other = sorted(set(kinds) - set(KINDS))
    if other:
        return f"its layers include {', '.join(other)}, which per-row masks do not reproduce"
    if len(kinds) > 1 and not takes_masks_by_kind(model):
        return (f"its config lists layers of kinds {', '.join(sorted(kinds))}, but its forward takes one mask for "
                "all of them")
    impl = model.config._attn_implementation
    if impl not in IMPLEMENTATIONS:
        return f"it runs {impl!r} attention, which takes no ready masks (per-row masks need {' or '.join(IMPLEMENTATIONS)})"
    return None


def row_masks(model, kinds: dict[str, int | None], real: torch.Tensor, query_positions: torch.Tensor):
    """The masks of one forward: a dict by attention kind when the model mixes kinds, else one mask.

    real: [B, columns] bool, which cache columns (this forward's included) hold each row's tokens;
    query_positions: [B, new columns], each new column's position in its row (padding repeats one).
    """
    key_positions = real.long().cumsum(dim=1) - 1
    impl = model.config._attn_implementation
    make = ALL_MASK_ATTENTION_FUNCTIONS[impl]
    batch, width = query_positions.shape

    def visible(window):
        def rule(b, _h, q, kv):
            k, at = key_positions[b, kv], query_positions[b, q]
            ok = real[b, kv] & (k <= at)
            return ok if window is None else ok & (at - k < window)

        return rule

    masks = {kind: make(batch_size=batch, q_length=width, kv_length=real.shape[1], mask_function=visible(window),
                        allow_is_causal_skip=False, device=real.device, dtype=model.dtype)
             for kind, window in kinds.items()}
    return masks if len(masks) > 1 else next(iter(masks.values()))
