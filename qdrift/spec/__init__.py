"""The declarative quantization spec: one frozen, serialisable object and its canonical string.

    spec = QuantSpec.parse("wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit")
    str(spec)                      # the same string: canonical, used in results, logs and cards
    QuantSpec.from_json(spec.to_json()) == spec

Only the standard library and pyyaml are imported here (no torch), so results and configs can
be read anywhere.

Grammar of the canonical string (every part separated by '-'):

    spec      := "w" phased "-a" phased "-" kv ("-win" INT)? ("-only:" globs)? ("-skip:" globs)?
    phased    := scheme | scheme "/" scheme          -- prefill "/" decode, only when they differ
    kv        := "kv:" kvscheme                       -- keys == values
               | "k:" kvscheme "-v:" kvscheme         -- when they differ
    scheme    := "16" | fmt gran? flags               -- "16" = not quantized (model dtype)
    kvscheme  := "16" | fmt gran? flags "@" source    -- source always explicit for quantized K/V
    fmt       := INT (2..8, integer) | "fp8e4m3" | "fp8e5m2" | "nf4" | "mxfp4" | "mxfp8" | "nvfp4"
    gran      := "t"        -- tensor
               | "c"        -- channel (weights: per output row; keys/values: @static)
               | "c" INT    -- channel, dynamic, scales over blocks of INT tokens (keys/values @dyn)
               | "g" INT    -- groups of INT along the last dim (input dim / head_dim)
               | "tok"      -- token (dynamic)
               | "h"        -- head (keys/values @static)
    flags     := "z"? ("~mse" | "~p" NUMBER)? ("~sr" INT)?
                            -- z zero-point (int only); ~mse / ~p99.9 clipping (weights only;
                            -- static scales are absmax); ~sr7 stochastic rounding with seed 7
    source    := "unit" | "static" | "dyn"              -- unit: scale 1, fp8 at tensor granularity only
    globs     := glob ("," glob)*                     -- fnmatch globs on module names, no '-' or ','
                            -- (-only: takes the head, embeddings or MoE routers only through a
                            -- glob that matches nothing else: qdrift.quant.select)
    INT       := [0-9]+
    NUMBER    := [0-9]+ ("." [0-9]+)?                 -- 0 < NUMBER <= 100

Canonical form (what `str()` prints; `parse` also takes the non-canonical variants in brackets):
- Defaults are omitted: weights "c" (per output channel), activations "tok" (dynamic per
  token; "t" is static per tensor), keys/values "t" for @unit/@static and "tok" for @dyn
  [explicit defaults are accepted]. nf4 always prints its group ("wnf4g64") [a bare "nf4" means
  g64]; mxfp4/mxfp8/nvfp4 print no granularity (their block is fixed: 32, 32, 16) and one after
  them is an error.
- Flags print in the order z, clip, sr [any order]; percentages without redundant zeros
  ("~p99.9", "~p100") [~p099.90].
- The w, a and kv parts are always printed, so the no-op spec is "w16-a16-kv:16" [missing ones
  mean 16]; parts print in the order above [any order]; "kv:" when keys == values ["k:X-v:X"];
  "/" only when prefill and decode differ ["w8/8"]; "-win", "-only:", "-skip:" only when set
  ["-win0"].
- Activations may carry "@dyn" / "@static" too, consistent with their granularity, which is how
  `str(TensorScheme)` (the role-free fragment) writes them; the spec string never does.

Roles and their granularities (the scale source is implied for activations, explicit for K/V):
- weights: t | c | g<N> | (block formats); no source.
- activations: tok, g<N>, (block formats): dynamic; t: static (calibrated).
- keys/values: t @unit (fp8 only) or @static; h @static; c @static; tok, g<N>, c<N> @dyn.
  The block formats are not available for the KV cache.
"""

from qdrift.spec.model import (
    BLOCK_SIZES,
    FIXED_BITS,
    FORMATS,
    GRANULARITIES,
    ROLES,
    SOURCES,
    KVScheme,
    LinearScheme,
    QuantSpec,
    TensorScheme,
)

__all__ = [
    "BLOCK_SIZES",
    "FIXED_BITS",
    "FORMATS",
    "GRANULARITIES",
    "ROLES",
    "SOURCES",
    "KVScheme",
    "LinearScheme",
    "QuantSpec",
    "TensorScheme",
]
