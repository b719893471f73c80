"""transformers' SDPA attention without its copy of the key/value heads under a mask, on the CPU.

For a model whose query heads share key/value heads (grouped-query attention), transformers' `sdpa`
path copies every cached key and value head once per query head that shares it (`repeat_kv`)
whenever a mask is given and more than one token is fed. That is every padded batched feed of
the runner: each step's tool results, prompts, teacher-forced replays. At a few thousand tokens of
context that copy and the attention over the copies cost more than the rest of the forward.
PyTorch's own SDPA shares the heads itself (`enable_gqa=True`), mask included, with bit-identical
output on the CPU (tests compare the two on runner-style padded masks and on whole sessions), so
only that branch is replaced here; every other call goes to transformers' function unchanged. One-token decode steps
are not touched: transformers already avoids the copy for them.

Written by hand because transformers enables the shared-head path only for unmasked attention on
CUDA (or by a process-wide environment variable that also changes its one-token path). The
function is registered under its own name and a session switches a model to it only for the
length of its own forwards (`shared_kv_heads`), so the user's model is left as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "qdrift_sdpa_gqa"


def sdpa_gqa_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                       is_causal=None, position_bias=None, **kwargs):
    """transformers' `sdpa_attention_forward`, with shared key/value heads for masked multi-token CPU calls."""
    groups = getattr(module, "num_key_value_groups", 1)
    if (query.device.type == "cpu" and groups > 1 and query.shape[2] > 1 and attention_mask is not None
            and position_bias is None and kwargs.get("softcap") is None and not kwargs.get("output_attentions")):
        # transformers' branch for this case: repeat_kv, then SDPA with the mask and is_causal=False.
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=False,
            enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, position_bias=position_bias, **kwargs)


AttentionInterface.register(NAME, sdpa_gqa_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the same masks as `sdpa`


def _configs(config) -> Iterator:
    yield config
    for key in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        if sub is not None:
            yield from _configs(sub)


def applies_to(model) -> bool:
    """Whether the model runs transformers' `sdpa` everywhere on the CPU (the case this replaces)."""
    config = getattr(model, "config", None)
    if config is None or not all(getattr(c, "_attn_implementation", None) == "sdpa" for c in _configs(config)):
        return False
    return all(p.device.type == "cpu" for p in model.parameters())


@contextmanager
def shared_kv_heads(model, enabled: bool = True) -> Iterator[None]:
    """Run the model's forwards inside with the shared-head SDPA; restore `sdpa` after, even on error.

    `enabled` should be `applies_to(model)`, computed once by the caller. Two threads that share a
    model can at worst run some layers with the other function, which computes the same values.
    """
    if not enabled:
        yield
        return
    model.config._attn_implementation = NAME  # the setter carries it to sub-configs
    try:
        yield
    finally:
        model.config._attn_implementation = "sdpa"
