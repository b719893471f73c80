"""The `qdrift` lm-eval model: lm-eval's HFLM around a model quantized by a qdrift spec.

    lm = QdriftLM(pretrained="organism", spec="w4g32-a16-kv:16")       # by name or local path
    lm = QdriftLM(pretrained=model, tokenizer=tok)                      # a loaded, maybe quantized, model

The canonical spec string and its hash are part of the model's identity (`model_name`,
`cache_tag`), so results and response caches of two specs never mix (see `qdrift.lmeval.cache`);
so is a fingerprint of the weights, tokenizer and options (`qdrift.lmeval.identity`), so two models
or two dtypes never mix either.

Loglikelihood requests are scored with `use_cache=False`. transformers 5 otherwise builds a
KV cache inside a plain forward call, and qdrift's cache layer quantizes on write, so the
prompt's own keys would pass through the KV format; lm-eval means these requests as one forward
pass without a cache, and so does qdrift: a KV spec touches only generation (`generate_until`).
Every such forward runs as prefill (`qdrift.quant.forced_phase`): a split prefill/decode spec would
otherwise score a one-token-wide batch with its decode weights, so a short request's loglikelihood
would depend on what it was batched with.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from qdrift.lmeval.cache import cache_key, cache_tag, check_cache_file
from qdrift.lmeval.load import load_pretrained
from qdrift.quant import quantize, restore, spec_of
from qdrift.quant.model import forced_phase
from qdrift.spec import QuantSpec

NOOP = "w16-a16-kv:16"


def resolve_spec(model, spec: QuantSpec | str | None) -> tuple[QuantSpec, bool]:
    """(the spec the model will run with, whether it still has to be applied).

    An already-quantized model keeps its spec; asking for a different one is a ValueError.
    """
    wanted = QuantSpec.parse(spec) if isinstance(spec, str) else spec
    current = spec_of(model)
    if current is not None:
        if wanted is not None and wanted != current:
            raise ValueError(
                f"spec={str(wanted)!r} but the model is already quantized with '{current}'; "
                "pass spec=None (or the same spec), or qdrift.restore(model) first"
            )
        return current, False
    wanted = wanted if wanted is not None else QuantSpec.parse(NOOP)
    return wanted, not wanted.is_noop


def _available(device: str | None) -> torch.device:
    """`device`, or the CPU when it is unset or absent (lm_eval's CLI asks for cuda:0 by default)."""
    if device is None or (device.startswith("cuda") and not torch.cuda.is_available()):
        return torch.device("cpu")
    return torch.device(device)


QDRIFT_OPTIONS = ("pretrained", "spec", "tokenizer", "dtype", "calibration", "batch_size", "device", "name")
# HFLM's named options (minus those qdrift sets itself), the only other model arguments it uses
_HFLM_OPTIONS = {p for p in inspect.signature(HFLM.__init__).parameters
                 if p not in ("self", "kwargs", "args", *QDRIFT_OPTIONS)}


@register_model("qdrift")
class QdriftLM(HFLM):
    """HFLM whose model is quantized in place by `spec` (None or "w16-a16-kv:16": the baseline)."""

    def __init__(
        self,
        pretrained: str | torch.nn.Module = "organism",
        spec: QuantSpec | str | None = None,
        tokenizer: Any = None,
        dtype: Any = None,
        calibration: Any = None,
        batch_size: int | str | None = 1,
        device: str | None = None,  # where a model loaded by name goes; a model object stays put
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        unknown = sorted(set(kwargs) - _HFLM_OPTIONS)
        if unknown:  # HFLM takes **kwargs and ignores what it does not know: a typo'd spec= would run unquantized
            raise ValueError(
                f"unknown model argument(s) {', '.join(unknown)} for the qdrift model; qdrift's are "
                f"{', '.join(QDRIFT_OPTIONS)}, and lm-eval's HFLM also takes {', '.join(sorted(_HFLM_OPTIONS))}")
        # what `model_key` hashes besides the model itself (a model loaded by name: its recipe)
        self._recipe = {"pretrained": pretrained if isinstance(pretrained, str) else None, "tokenizer": tokenizer,
                        "dtype": dtype, "batch_size": batch_size, "device": _available(device).type,
                        "kwargs": dict(kwargs)}
        self._model_key: str | None = None
        if isinstance(pretrained, str):
            model_name = name or pretrained
            model, tokenizer = load_pretrained(pretrained, tokenizer=tokenizer, dtype=dtype)
            model.to(_available(device))
        else:
            model = pretrained
            model_name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
            if tokenizer is None:
                raise ValueError("tokenizer=None with a model object: pass the model's tokenizer "
                                 "(qdrift never fetches one from the hub)")
            if dtype is not None:  # it was ignored: the run (and its cache key) would not be in that dtype
                raise ValueError(f"dtype={dtype!r} with a model object: dtype= applies to a model loaded by name; "
                                 f"a model object runs in its own dtype ({next(model.parameters()).dtype}), so "
                                 "convert it first (model.to(torch.bfloat16)) and drop dtype=")
        self.spec, apply = resolve_spec(model, spec)
        if apply:
            quantize(model, self.spec, calibration=calibration)
        self.applied_here = apply
        self.base_name = str(model_name)
        try:
            super().__init__(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, **kwargs)
        except BaseException:
            if apply:  # leave a caller's model as it came
                restore(model)
            raise

    @property
    def spec_str(self) -> str:
        return str(self.spec)

    @property
    def spec_hash(self) -> str:
        return self.spec.hash

    @property
    def model_name(self) -> str:
        """`<model>@<canonical spec>#<hash>`: the identity written into rows and results."""
        return f"{self.base_name}@{self.spec}#{self.spec.hash}"

    @property
    def model_key(self) -> str:
        """Hash of what this model computes besides its spec: weights, tokenizer, static scales, options
        (`qdrift.lmeval.identity`). Computed once, on first use (it reads the weights of a model object).
        A ValueError when a part cannot be fingerprinted: a response cache is then refused."""
        if self._model_key is None:
            from qdrift.lmeval import identity

            r = self._recipe
            scales = identity.static_scales_fingerprint(self.model)
            if r["pretrained"] is not None:
                self._model_key = identity.recipe_key(
                    r["pretrained"], tokenizer=r["tokenizer"], dtype=r["dtype"], batch_size=r["batch_size"],
                    device=r["device"], kwargs=r["kwargs"], static_scales=scales)
            else:
                self._model_key = identity.model_key(
                    weights=identity.weights_fingerprint(self.model),
                    tokenizer=identity.tokenizer_fingerprint(self.tokenizer), static_scales=scales,
                    options={"batch_size": str(r["batch_size"]), "device": self.model.device.type,
                             **identity.hflm_options(r["kwargs"])})
        return self._model_key

    @property
    def cache_key(self) -> str:
        """`model-<hex>.spec-<hash>.code-<hex>`: what this model's cache file name must carry."""
        return cache_key(self.model_key, self.spec.hash)

    def checked_cache_key(self) -> str:
        """`cache_key`, its ValueError saying that a response cache is what is refused."""
        try:
            return self.cache_key
        except ValueError as e:
            raise ValueError(f"use_cache refused for {self.base_name}: {e}. Run without a response cache "
                             "(cached answers could not be told apart from another model's)") from None

    @property
    def cache_tag(self) -> str:
        """`<model>.<cache_key>`: this model's response-cache file name (`tagged_cache_path`)."""
        return cache_tag(self.base_name, self.model_key, self.spec.hash)

    def get_model_info(self) -> dict[str, Any]:
        """lm-eval merges this into results["config"]: the spec goes into every results file."""
        return {**super().get_model_info(), "model_identity": self.model_name, "qdrift_model": self.base_name,
                "qdrift_spec": self.spec_str, "qdrift_spec_hash": self.spec.hash}

    def set_cache_hook(self, cache_hook) -> None:
        """Refuse a response cache whose file does not carry this model's key (see qdrift.lmeval.cache)."""
        db = getattr(cache_hook, "dbdict", None)
        if db is not None:
            check_cache_file(db.filename, self.checked_cache_key())
        super().set_cache_hook(cache_hook)

    def _model_call(self, inps: torch.Tensor, attn_mask=None, labels=None) -> torch.Tensor:
        if attn_mask is not None or labels is not None:
            return super()._model_call(inps, attn_mask=attn_mask, labels=labels)
        # As HFLM's own call, mixed precision included; use_cache=False and the prefill phase are the
        # changes (a one-token-wide batch would otherwise run as decode: see the module docstring).
        with torch.no_grad(), forced_phase(self.model, "prefill"), torch.autocast(
                device_type=self.device.type, dtype=self.mixed_precision_dtype,
                enabled=self.mixed_precision_dtype is not None):
            return self.model(inps, use_cache=False).logits
