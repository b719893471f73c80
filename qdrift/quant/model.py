"""`quantize(model, spec)`: fake quantization of a loaded transformers causal LM, in place.

The model stays the same `PreTrainedModel`, so `generate()`, manual forward loops and lm-eval's
`HFLM(pretrained=model)` keep working. A pre-forward hook on the decoder stack sets the phase
(prefill = multi-token forward, decode = single-token forward) and makes every KV cache the
model touches quantize on write.

Memory: the original weights of the quantized modules are kept for `restore()` (one extra copy of
those weights, a second one when prefill and decode quantize weights differently). Pass
`keep_original=False` to drop them once quantization has succeeded (restore then needs a reload;
the peak during `quantize` is the same), or `original_device="cpu"` to park them off the accelerator.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import DynamicCache

from qdrift.quant import linear
from qdrift.quant.kernels import check_path
from qdrift.quant.kv import LayerKVQuantizer, convert_cache, declare_written
from qdrift.quant.select import Target, select
from qdrift.spec import QuantSpec

ATTR = "_qdrift_state"


@dataclass
class QuantState:
    spec: QuantSpec
    targets: list[Target]
    modules: list[linear.ModuleQuant] = field(default_factory=list)
    kv: list[LayerKVQuantizer] = field(default_factory=list)
    phase: str = "prefill"
    calibrating: bool = False
    hook: object | None = None
    cache_kwarg: str = "cache"
    forced_phase: str | None = None  # set by `forced_phase`: the phase whatever a forward's width

    @property
    def defers_kv(self) -> bool:
        """Whether the KV part waits for token blocks or keeps a full-precision window."""
        return any(q.deferred for q in self.kv)

    def set_phase(self, phase: str) -> None:
        if phase == self.phase:
            return
        self.phase = phase
        for mq in self.modules:
            for slot in mq.slots:
                slot.show(phase)


@contextmanager
def forced_phase(model: nn.Module, phase: str | None) -> Iterator[None]:
    """Run the forwards inside as `phase` ("prefill" or "decode") whatever their width.

    By default a forward of one token a row is decode and a wider one prefill. A caller that knows
    which tokens were generated and which were fed (the batched session) says so instead: a fed row
    of one token beside a wider one would otherwise be prefill in that batch and decode alone, and a
    waiting token fed on its own decode where a serving engine prefills it. No-op for a model qdrift
    has not quantized, or phase None."""
    state = getattr(model, ATTR, None)
    if state is None or phase is None:
        yield
        return
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")
    before, state.forced_phase = state.forced_phase, phase
    try:
        yield
    finally:
        state.forced_phase = before


def spec_of(model: nn.Module) -> QuantSpec | None:
    """The spec a model is currently quantized with, or None for an unquantized model."""
    state = getattr(model, ATTR, None)
    return None if state is None else state.spec


def state_of(model: nn.Module) -> QuantState | None:
    return getattr(model, ATTR, None)


def reseed_rounding(model: nn.Module) -> None:
    """Restart every stochastic-rounding stream of a quantized model (activations, KV cache) from its seed.

    The streams run on across forwards, so what a run draws depends on everything the model computed
    before it. A sweep reseeds at the start of each cell, so that a cell's results follow from its own
    configuration, not from which cells its process ran first (a resumed or a parallel sweep runs
    others). Weights are rounded once, when the model is quantized. No-op for an unquantized model.
    """
    state = state_of(model)
    if state is None:
        return
    for mq in state.modules:
        for quantizers in mq.acts.values():
            for q in quantizers.values():
                q.reseed()
    for layer in state.kv:
        for q in layer.parts():
            q.reseed()


def _num_attention_layers(model: nn.Module) -> int:
    config = model.config.get_text_config(decoder=True)
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        if getattr(config, key, None):
            return int(getattr(config, key))
    raise ValueError(f"cannot tell the number of layers of {type(model).__name__} from its config")


def defers_kv_quantization(model: nn.Module) -> str | None:
    """The spec of a qdrift-quantized model whose KV part defers quantization (token blocks, a
    full-precision window), else None."""
    state = state_of(model)
    if state is not None and state.defers_kv:
        return str(state.spec)
    return None


def _seq_len(args, kwargs) -> int | None:
    ids = kwargs.get("input_ids", args[0] if args else None)
    if ids is None:
        ids = kwargs.get("inputs_embeds")
    if ids is None or ids.dim() < 2:
        return None
    return ids.shape[1]


def cache_kwarg(base: nn.Module) -> str:
    """The keyword a decoder stack takes its cache by: `cache` in transformers 5, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _install_forward_hook(model: nn.Module, state: QuantState) -> None:
    base = model.base_model
    state.cache_kwarg = cache_kwarg(base)
    config = base.config

    def pre_forward(module, args, kwargs):
        n = _seq_len(args, kwargs)
        if state.forced_phase is not None:
            state.set_phase(state.forced_phase)
        elif n is not None:
            state.set_phase("prefill" if n > 1 else "decode")
        if state.kv:
            name = state.cache_kwarg
            other = "past_key_values" if name == "cache" else "cache"
            cache = kwargs.get(name)
            if cache is None and kwargs.get(other) is not None:
                cache = kwargs.pop(other)
            use_cache = kwargs.get("use_cache")
            if use_cache is None:
                use_cache = getattr(config, "use_cache", False)
            if cache is None and use_cache:
                cache = DynamicCache(config=config)
            if cache is not None:
                kwargs.pop(other, None)
                kwargs[name] = cache
                convert_cache(cache, state.kv)
                mask = kwargs.get("attention_mask")
                if (state.defers_kv and n is not None and isinstance(mask, torch.Tensor) and mask.dim() == 2
                        and mask.shape[1] >= n):
                    # A padded batch (generate() left-pads): windows and token blocks count real tokens.
                    declare_written(cache, mask[:, mask.shape[1] - n :])
        return args, kwargs

    state.hook = base.register_forward_pre_hook(pre_forward, with_kwargs=True)


def _calibrate(model: nn.Module, state: QuantState, calibration: Iterable) -> int:
    """Run calibration batches in full precision, recording the ranges static scales are set from."""
    state.calibrating = True
    for q in state.kv:
        for part in q.parts():
            part.observing = True
    batches = 0
    try:
        with torch.no_grad():
            for batch in calibration:
                if isinstance(batch, torch.Tensor):
                    batch = {"input_ids": batch if batch.dim() == 2 else batch.unsqueeze(0)}
                batch = {k: v.to(model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                model(**batch, use_cache=bool(state.kv))
                batches += 1
    finally:
        state.calibrating = False
    if batches == 0:
        raise ValueError("calibration= yielded no batches; static scales need at least one")
    for mq in state.modules:
        linear.finish_calibration(mq)
    for q in state.kv:
        for part in q.parts():
            part.finish_calibration()
    return batches


def _needs_calibration(spec: QuantSpec) -> list[str]:
    need = []
    for phase in ("prefill", "decode"):
        act = getattr(spec, phase).activations
        if act is not None and act.source == "static":
            need.append(f"{phase} activations ({act})")
    for role in ("keys", "values"):
        s = getattr(spec.kv, role)
        if s is not None and s.source == "static":
            need.append(f"{role} ({s})")
    return need


def quantize(
    model: nn.Module,
    spec: QuantSpec | str,
    *,
    calibration: Iterable | None = None,
    keep_original: bool = True,
    original_device: str | torch.device | None = None,
    path: str = "fake",
) -> nn.Module:
    """Apply `spec` to `model` in place and return it.

    calibration: batches (input-id tensors or dicts of model inputs) for specs with static
    activation or KV scales; they run through the full-precision model before weights change.
    path: "fake" (quantize-dequantize, runs everywhere) or "real": the weights are stored packed
    and run through fused low-precision kernels (`qdrift.real.quantize_real(model, spec,
    kernel="fused")`; a layer with no kernel for its device and dtype raises at its first forward,
    naming why). The real path drops the original weights, so `qdrift.restore` cannot undo it.
    """
    spec = QuantSpec.parse(spec) if isinstance(spec, str) else spec
    if not isinstance(spec, QuantSpec):
        raise TypeError(f"spec must be a QuantSpec or its string form, got {type(spec).__name__}")
    device = next(model.parameters()).device
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    check_path(spec, path, device.type, capability)
    if path == "real":
        if calibration is not None:
            raise ValueError("path='real' stores weights only and takes no calibration; drop calibration=")
        if original_device is not None:
            raise ValueError("path='real' keeps no original weights, so original_device= has nothing to move; drop it")
        from qdrift.real import quantize_real  # qdrift.real builds on this module

        return quantize_real(model, spec, kernel="fused")
    if state_of(model) is not None:
        raise ValueError(
            f"model is already quantized with '{spec_of(model)}'; call qdrift.restore(model) first"
        )
    if original_device is not None:  # checked before any work, not at the move after quantizing
        target = torch.device(original_device)
        if target.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"original_device={original_device!r}, but torch sees no CUDA device "
                             f"(torch {torch.__version__}); use 'cpu' or drop it")
    need = _needs_calibration(spec)
    if need and calibration is None:
        raise ValueError(f"spec '{spec}' has static scales for {', '.join(need)}: pass calibration=batches")
    if not need and calibration is not None:
        raise ValueError(f"spec '{spec}' has no static scales to calibrate; drop calibration=")

    schemes = {"prefill": spec.prefill, "decode": spec.decode}
    quantizes_linears = any(s.weights or s.activations for s in schemes.values())
    targets = select(model, spec) if (quantizes_linears or spec.include or spec.exclude) else []
    if quantizes_linears and not targets:
        raise ValueError(f"spec '{spec}' quantizes weights or activations but selects no module")
    for t in targets:
        linear.validate(t, schemes)

    state = QuantState(spec=spec, targets=targets)
    if spec.kv.keys is not None or spec.kv.values is not None:
        state.kv = [LayerKVQuantizer(spec.kv, i) for i in range(_num_attention_layers(model))]
    state.modules = [linear.attach(t, schemes, state) for t in targets]
    _install_forward_hook(model, state)
    setattr(model, ATTR, state)
    try:
        if need:
            _calibrate(model, state, calibration)
        for mq in state.modules:
            linear.quantize_weights(mq, schemes, state.phase)
    except BaseException:
        _undo(model, state)  # originals are still all there, so this restores exactly
        raise
    # An original the model still computes with (a tied head's embedding) stays where it is: moving it
    # would move the live embedding off the model's device.
    live = {id(p) for p in model.parameters()}
    for mq in state.modules:
        for slot in mq.slots:
            if not keep_original:
                slot.original = None
            elif original_device is not None and id(slot.original) not in live:
                slot.original.data = slot.original.data.to(original_device)
    return model


def _undo(model: nn.Module, state: QuantState) -> None:
    if state.hook is not None:
        state.hook.remove()
    for mq in state.modules:
        linear.detach(mq)
    model.__dict__.pop(ATTR, None)


def restore(model: nn.Module) -> nn.Module:
    """Give the model back its full-precision weights and forward, without reloading from disk."""
    state = state_of(model)
    if state is None:
        from qdrift.real.convert import real_spec_of  # qdrift.real builds on this module: imported here

        if real_spec_of(model) is not None:
            raise ValueError("this model was quantized with path='real': its full-precision weights were replaced by "
                             "stored codes, so it cannot be restored; reload the model (restore is for the fake path)")
        raise ValueError("model is not quantized by qdrift: nothing to restore")
    dropped = [f"{s.target.name}.{s.param}" for mq in state.modules for s in mq.slots if s.original is None]
    if dropped:
        raise RuntimeError(
            f"cannot restore {dropped[0]} (and {len(dropped) - 1} more): quantized with keep_original=False, "
            "so the full-precision weights were dropped; reload the model"
        )
    for mq in state.modules:
        for slot in mq.slots:
            device = slot.live.device
            if slot.original.device != device:
                slot.original.data = slot.original.data.to(device)
    _undo(model, state)
    return model
