"""What a fine-tuning run is: base model, data mixture, optimiser, schedule; validated, hashed.

Training draws seeds below `qdrift.envs.registry.DEV_SEEDS_FROM`; the training seeds above it are left
for calibrating difficulty (qdrift.envs.calibrate), so neither training nor calibration touches a
held-out evaluation seed, and calibration never sees a trained instance.

A run's directory records its configuration; resuming it with any other configuration is refused
(the hash covers every field that changes what is trained), so a checkpoint is never continued
under a different recipe.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

METHODS = ("lora",)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class MixEntry:
    """One source of training episodes: an environment, its horizon range and knob choices."""

    env: str                              # a built-in name or path/to/file.py@Class
    horizons: tuple[int, int]             # drawn log-uniformly in lo..hi (inclusive)
    knobs: dict[str, tuple[int, ...]] = field(default_factory=dict)  # each episode takes one value of each
    weight: float = 1.0

    def to_dict(self) -> dict:
        return {"env": self.env, "horizons": list(self.horizons), "knobs": {k: list(v) for k, v in self.knobs.items()},
                "weight": self.weight}


@dataclass(frozen=True)
class FinetuneConfig:
    base: str                              # a model reference (qdrift.models.refs)
    mix: tuple[MixEntry, ...]
    parser: str = "pythonic"               # the tool-call format trained and evaluated
    prompt_mode: str = "prompted"
    method: str = "lora"
    lora_r: int = 16
    lora_alpha: int = 32
    lora_targets: tuple[str, ...] = LORA_TARGETS
    lr: float = 3e-4
    weight_decay: float = 0.0
    warmup_steps: int = 10
    steps: int = 100
    episodes_per_step: int = 4
    max_tokens: int = 4096                 # an episode longer than this is cut (loss on its first part)
    seed: int = 0
    autocast_bf16: bool = True
    qat: str | None = None                 # e.g. "w4g64": int4 fake quantization of the merged weight
    # Another fine-tune of the same base (a shipped name or a folder) whose adapter this run starts
    # from, for a second stage; None starts from peft's initialisation (B = 0).
    init_from: str | None = None
    # Not part of what is trained (kept out of the hash): how often a checkpoint is written.
    checkpoint_every_s: float = 180.0

    _UNHASHED = ("checkpoint_every_s",)

    def __post_init__(self):
        from qdrift.models.refs import check_model_ref

        problem = check_model_ref(self.base)
        if problem:
            raise ValueError(f"base: {problem}")
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r} is not built; valid: {', '.join(METHODS)} (full fine-tuning "
                             "would ship 135M+ weights, over the size a committed model may have)")
        from qdrift.envs.parsers import PARSERS

        if self.parser not in PARSERS:
            raise ValueError(f"parser {self.parser!r} is unknown; valid: {', '.join(PARSERS)}")
        if self.prompt_mode not in ("prompted", "native", "auto"):
            raise ValueError(f"prompt_mode {self.prompt_mode!r}; valid: prompted, native, auto")
        for name, lo in (("lora_r", 1), ("lora_alpha", 1), ("steps", 1), ("episodes_per_step", 1),
                         ("max_tokens", 16), ("warmup_steps", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < 1):
            raise ValueError(f"lr must be in (0, 1), got {self.lr!r}")
        if not self.mix:
            raise ValueError("mix: at least one environment entry is needed")
        bad = sorted(set(self.lora_targets) - set(LORA_TARGETS))
        if bad:
            raise ValueError(f"lora_targets: unknown {bad}; valid: {', '.join(LORA_TARGETS)}")
        if self.qat is not None:
            from qdrift.finetune.qat import check_qat_spec

            check_qat_spec(self.qat)
        if self.init_from is not None:
            from qdrift.models.agents import check_finetune, finetune_dir, summary

            folder = finetune_dir(self.init_from)
            problem = check_finetune(folder) if folder else (
                f"{self.init_from!r} is neither a shipped fine-tune nor a fine-tune's folder")
            if problem:
                raise ValueError(f"init_from: {problem}")
            src = summary(folder)["config"]
            if src["base"] != self.base or (src["lora_r"], list(src["lora_targets"])) != (self.lora_r, list(self.lora_targets)):
                raise ValueError(f"init_from: {self.init_from!r} is a rank-{src['lora_r']} adapter on {src['lora_targets']} of "
                                 f"base {src['base']!r}; this run trains rank {self.lora_r} on {list(self.lora_targets)} of "
                                 f"{self.base!r}: they must match")
        for i, m in enumerate(self.mix):
            _check_entry(i, m)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["mix"] = [m.to_dict() for m in self.mix]
        d["lora_targets"] = list(self.lora_targets)
        return d

    def hash(self) -> str:
        """Of every trained field, and of the adapter `init_from` names (a name's adapter may be replaced)."""
        d = {k: v for k, v in self.to_dict().items() if k not in self._UNHASHED}
        if self.init_from is not None:
            d["init_from_adapter"] = self._init_fingerprint
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    @cached_property
    def _init_fingerprint(self) -> str:
        """sha256 over the adapter files of `init_from`, read once."""
        from qdrift.models.agents import finetune_dir, finetune_files
        from qdrift.models.fingerprint import files_fingerprint

        return files_fingerprint(finetune_files(finetune_dir(self.init_from)))

    @classmethod
    def from_dict(cls, d: dict) -> FinetuneConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(known))}")
        if "base" not in d or "mix" not in d:
            raise ValueError("a fine-tuning config needs 'base' (a model reference) and 'mix' (environments)")
        mix = tuple(_entry(i, m) for i, m in enumerate(d["mix"] or []))
        rest = {k: v for k, v in d.items() if k != "mix"}
        if "lora_targets" in rest:
            rest["lora_targets"] = tuple(rest["lora_targets"])
        return cls(mix=mix, **rest)


def _entry(i: int, m: Any) -> MixEntry:
    if not isinstance(m, dict) or "env" not in m or "horizons" not in m:
        raise ValueError(f"mix[{i}] must be a mapping with 'env' and 'horizons' ([lo, hi]), got {m!r}")
    unknown = sorted(set(m) - {"env", "horizons", "knobs", "weight"})
    if unknown:
        raise ValueError(f"mix[{i}]: unknown key {unknown[0]!r}; valid: env, horizons, knobs, weight")
    h = m["horizons"]
    if not (isinstance(h, (list, tuple)) and len(h) == 2 and all(isinstance(x, int) and x >= 1 for x in h) and h[0] <= h[1]):
        raise ValueError(f"mix[{i}].horizons must be [lo, hi] with 1 <= lo <= hi, got {h!r}")
    knobs = {}
    for k, v in (m.get("knobs") or {}).items():
        values = v if isinstance(v, (list, tuple)) else [v]
        if not values or not all(isinstance(x, int) and not isinstance(x, bool) for x in values):
            raise ValueError(f"mix[{i}].knobs.{k} must be an integer or a list of integers, got {v!r}")
        knobs[k] = tuple(values)
    w = m.get("weight", 1.0)
    if not isinstance(w, (int, float)) or w <= 0:
        raise ValueError(f"mix[{i}].weight must be > 0, got {w!r}")
    return MixEntry(m["env"], (h[0], h[1]), knobs, float(w))


def _check_entry(i: int, m: MixEntry) -> None:
    """Every knob value and both horizon ends must build an instance (clear errors before training)."""
    from qdrift.envs.registry import make_environment

    choices = [dict()]
    for k, values in m.knobs.items():
        choices = [{**c, k: v} for c in choices for v in values]
    for knobs in choices[:64]:
        for h in m.horizons:
            try:
                make_environment(m.env, horizon=h, seed=0, split="train", **knobs)
            except (ValueError, TypeError, FileNotFoundError, ImportError) as e:
                raise ValueError(f"mix[{i}] ({m.env}, horizon {h}, knobs {knobs}): {e}") from e


def recipes() -> list[str]:
    """The shipped recipes' names (`qdrift finetune NAME`)."""
    return sorted(p.name[:-5] for p in resources.files("qdrift.finetune.recipes").iterdir() if p.name.endswith(".yaml"))


def load_config(ref: str | Path) -> FinetuneConfig:
    """A config from a shipped recipe name or a YAML file."""
    import yaml

    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"fine-tuning config {str(path)!r} not found")
        text = path.read_text()
    elif str(ref) in recipes():
        text = resources.files("qdrift.finetune.recipes").joinpath(f"{ref}.yaml").read_text()
    else:
        raise ValueError(f"{str(ref)!r} is neither a YAML file nor a shipped recipe; recipes: {', '.join(recipes())}")
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"fine-tuning config {ref}: expected a mapping, got {type(data).__name__}")
    if "extends" in data:  # another config with some keys replaced (a QAT twin of a recipe, say)
        parent = data.pop("extends")
        if parent == str(ref):
            raise ValueError(f"fine-tuning config {ref} extends itself")
        data = {**load_config(parent).to_dict(), **data}
    return FinetuneConfig.from_dict(data)


