"""The spec's data model: frozen dataclasses and their validation (standard library only).

A `TensorScheme` checks what it can on its own (format, bits, granularity, group size, symmetry,
source, clipping, seed); where it is used (weights, activations, keys or values) decides the rest,
so `LinearScheme` and `KVScheme` check their schemes against their role, and fill in the scale
source where the granularity implies it (activations: token/group/block -> dynamic, tensor ->
static; keys/values: head -> static, token/group -> dynamic, channel -> dynamic with a token
block, static without). Every error is a ValueError naming the field or role, the bad value and
the valid choices.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
from dataclasses import dataclass

ROLES = ("weights", "activations", "keys", "values")
FORMATS = ("int", "fp8e4m3", "fp8e5m2", "nf4", "mxfp4", "mxfp8", "nvfp4")
GRANULARITIES = ("tensor", "channel", "group", "token", "head", "block")
SOURCES = ("dynamic", "static", "unit")

MIN_BITS, MAX_BITS = 2, 8
# Formats whose element width is fixed by the format.
FIXED_BITS = {"fp8e4m3": 8, "fp8e5m2": 8, "nf4": 4, "mxfp4": 4, "mxfp8": 8, "nvfp4": 4}
# Formats with a fixed block (granularity "block" and only that).
BLOCK_SIZES = {"mxfp4": 32, "mxfp8": 32, "nvfp4": 16}
FP8_FORMATS = ("fp8e4m3", "fp8e5m2")
NF4_DEFAULT_GROUP = 64
LINEAR_ROLES = ("weights", "activations")
KV_ROLES = ("keys", "values")

# Granularities each role accepts (block only for the block formats, see BLOCK_SIZES).
ROLE_GRANULARITIES = {
    "weights": ("tensor", "channel", "group", "block"),
    "activations": ("token", "group", "tensor", "block"),
    "keys": ("tensor", "head", "token", "group", "channel"),
    "values": ("tensor", "head", "token", "group", "channel"),
}
# Which scale sources go with which granularity (keys/values; activations use a subset).
SOURCE_GRANULARITIES = {
    "unit": ("tensor",),
    "static": ("tensor", "head", "channel"),
    "dynamic": ("token", "group", "channel", "block"),
}
_PERCENT = re.compile(r"p(\d+)(?:\.(\d+))?")


def did_you_mean(value: object, options) -> str:
    """ " Did you mean 'x'?" for the closest option (the first one on ties), or ""."""
    value = str(value)
    best, best_key = None, None
    for option in map(str, options):
        prefix = len(os.path.commonprefix([value, option]))
        ratio = difflib.SequenceMatcher(None, value, option).ratio()
        key = (min(prefix, len(option)), ratio)
        if (prefix >= 2 or ratio >= 0.5) and (best_key is None or key > best_key):
            best, best_key = option, key
    return f" Did you mean '{best}'?" if best is not None else ""


def choices(values) -> str:
    return ", ".join(str(v) for v in values)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def normalize_clip(clip: object) -> str:
    """The canonical clip string ("absmax", "mse" or "p<percent>", no redundant zeros) or ValueError."""
    if clip in ("absmax", "mse"):
        return clip
    m = _PERCENT.fullmatch(clip) if isinstance(clip, str) else None
    if m is not None:
        whole = m.group(1).lstrip("0") or "0"
        frac = (m.group(2) or "").rstrip("0")
        text = f"{whole}.{frac}" if frac else whole
        if 0 < float(text) <= 100:
            return f"p{text}"
    raise ValueError(
        f"clip: invalid value {clip!r}. Valid: 'absmax', 'mse', 'p<percent>' with 0 < percent <= 100 (e.g. 'p99.9')"
    )


@dataclass(frozen=True)
class TensorScheme:
    """How one kind of tensor is quantized: element format, scale granularity, scales, rounding."""

    format: str
    bits: int
    granularity: str
    group_size: int | None = None
    symmetric: bool = True
    source: str | None = None
    clip: str = "absmax"
    seed: int | None = None

    def __post_init__(self):
        fmt = self.format
        if fmt not in FORMATS:
            raise ValueError(
                f"format: unknown format {fmt!r}.{did_you_mean(fmt, FORMATS)} Valid: {choices(FORMATS)}"
            )
        if not _is_int(self.bits):
            raise ValueError(f"bits: must be an integer, got {self.bits!r}")
        if fmt in FIXED_BITS:
            if self.bits != FIXED_BITS[fmt]:
                raise ValueError(f"bits: {fmt} has a fixed {FIXED_BITS[fmt]} bits, got {self.bits}")
        elif not MIN_BITS <= self.bits <= MAX_BITS:
            raise ValueError(
                f"bits: {self.bits} is out of range for format 'int'. Valid: {MIN_BITS}..{MAX_BITS}"
            )
        g = self.granularity
        if g not in GRANULARITIES:
            raise ValueError(
                f"granularity: unknown granularity {g!r}.{did_you_mean(g, GRANULARITIES)} Valid: {choices(GRANULARITIES)}"
            )
        if fmt in BLOCK_SIZES and g != "block":
            raise ValueError(
                f"granularity: {fmt} has a fixed block of {BLOCK_SIZES[fmt]}: it must be 'block', got {g!r}"
            )
        if g == "block" and fmt not in BLOCK_SIZES:
            raise ValueError(
                f"granularity: 'block' is only for the block formats {choices(BLOCK_SIZES)}, not {fmt!r}"
            )
        if fmt == "nf4" and g != "group":
            raise ValueError(
                f"granularity: nf4 must be 'group' (default group size {NF4_DEFAULT_GROUP}), got {g!r}"
            )
        self._check_group_size()
        if not isinstance(self.symmetric, bool):
            raise ValueError(f"symmetric: must be True or False, got {self.symmetric!r}")
        if not self.symmetric and fmt != "int":
            raise ValueError(
                f"symmetric: zero-point (asymmetric) quantization is only for format 'int', not {fmt!r}"
            )
        self._check_source()
        object.__setattr__(self, "clip", normalize_clip(self.clip))
        if self.clip != "absmax" and self.source in ("dynamic", "unit"):
            raise ValueError(
                f"clip: {self.clip!r} needs scales computed from known data (weights); "
                f"a {self.source} source takes only 'absmax'"
            )
        if self.clip != "absmax" and self.source == "static":
            raise ValueError("clip: " + STATIC_CLIP_NOT_BUILT.format(clip=self.clip))
        if self.seed is not None and not (_is_int(self.seed) and self.seed >= 0):
            raise ValueError(
                f"seed: must be None (round to nearest) or a non-negative integer, got {self.seed!r}"
            )

    def _check_group_size(self) -> None:
        g, gs = self.granularity, self.group_size
        if g == "block":
            if gs is None:
                object.__setattr__(self, "group_size", BLOCK_SIZES[self.format])
            elif gs != BLOCK_SIZES[self.format]:
                raise ValueError(
                    f"group_size: {self.format} has a fixed block of {BLOCK_SIZES[self.format]}, got {gs!r}"
                )
            return
        if g == "group" and gs is None and self.format == "nf4":
            object.__setattr__(self, "group_size", NF4_DEFAULT_GROUP)
            return
        if gs is not None and not (_is_int(gs) and gs > 0):
            raise ValueError(f"group_size: must be a positive integer, got {gs!r}")
        if g == "group" and gs is None:
            raise ValueError("group_size: granularity 'group' needs a positive group size (e.g. 128)")
        if g in ("tensor", "token", "head") and gs is not None:
            raise ValueError(f"group_size: granularity {g!r} takes no group size (None), got {gs!r}")
        if g == "channel" and gs is not None and self.source not in (None, "dynamic"):
            raise ValueError(
                f"group_size: per-channel {self.source} scales take no group size (None), got {gs!r}; "
                "a token block length is only for dynamic per-channel keys/values"
            )
        if g == "channel" and gs is None and self.source == "dynamic":
            raise ValueError(
                "group_size: dynamic per-channel scales need the token block length (e.g. 32, 'c32' in a spec)"
            )

    def _check_source(self) -> None:
        src = self.source
        if src is None:
            return
        if src not in SOURCES:
            raise ValueError(
                f"source: unknown source {src!r}.{did_you_mean(src, SOURCES)} Valid: None, {choices(SOURCES)}"
            )
        g = self.granularity
        if g not in SOURCE_GRANULARITIES[src]:
            fits = [s for s in SOURCES if g in SOURCE_GRANULARITIES[s]]
            raise ValueError(
                f"source: {src!r} scales do not go with granularity {g!r} (which takes {' or '.join(map(repr, fits))}). "
                f"Valid granularities for {src!r}: {choices(SOURCE_GRANULARITIES[src])}"
            )
        if src == "unit" and self.format not in FP8_FORMATS:
            raise ValueError(
                f"source: 'unit' scales are only for the fp8 formats ({choices(FP8_FORMATS)}) at tensor granularity, "
                f"not {self.format!r}. Valid sources here: static, dynamic"
            )

    # --- derived --------------------------------------------------------------------------
    @property
    def number_format(self) -> str:
        """The element format's name in the number-format registry: "int4", "uint4", "fp8e4m3", "nf4", ..."""
        if self.format == "int":
            return f"{'' if self.symmetric else 'u'}int{self.bits}"
        return self.format

    @property
    def rounding(self) -> str:
        return "nearest" if self.seed is None else "stochastic"

    # --- text ---------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, role: str) -> TensorScheme | None:
        """Parse one scheme fragment for `role` ("4g128z", "fp8e4m3@unit"); "16" gives None."""
        from qdrift.spec.grammar import parse_scheme

        return parse_scheme(text, role)

    def to_string(self, role: str) -> str:
        """The fragment as it appears in a spec string for `role` (defaults of that role omitted)."""
        from qdrift.spec.grammar import format_scheme

        return format_scheme(self, role)

    def __str__(self) -> str:
        """Role-free fragment: the weights form when there is no source, else the K/V form with '@source'."""
        return self.to_string(self.implied_role)

    @property
    def implied_role(self) -> str:
        return "weights" if self.source is None else "keys"

    def describe(self, role: str | None = None) -> str:
        """One plain-English line, e.g. 'weights: int4, symmetric, groups of 128 along the input dim, ...'."""
        from qdrift.spec.describe import describe_scheme

        return describe_scheme(self, role)

    # --- dict --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data, role: str) -> TensorScheme | None:
        from qdrift.spec.serial import scheme_from_dict

        return scheme_from_dict(data, role)


def _check_scheme_type(value: object, role: str) -> None:
    if value is not None and not isinstance(value, TensorScheme):
        raise ValueError(
            f"{role}: must be a TensorScheme or None (not quantized), got {type(value).__name__} {value!r}"
            + (
                f"; parse a fragment with TensorScheme.parse({value!r}, {role!r})"
                if isinstance(value, str)
                else ""
            )
        )


def default_granularity(fmt: str, role: str, source: str | None) -> str | None:
    """The granularity a spec fragment means when it names none (None: K/V without a source)."""
    if fmt in BLOCK_SIZES:
        return "block"
    if fmt == "nf4":
        return "group"
    if role == "weights":
        return "channel"
    if role == "activations":
        return "tensor" if source == "static" else "token"
    if source is None:
        return None
    return "token" if source == "dynamic" else "tensor"


def implied_source(scheme: TensorScheme, role: str) -> str | None:
    """The scale source a granularity implies for `role`, or None where it is ambiguous or absent."""
    g = scheme.granularity
    if role == "activations":
        return "static" if g == "tensor" else "dynamic"
    if role in KV_ROLES:
        if g == "head":
            return "static"
        if g in ("token", "group", "block"):
            return "dynamic"
        if g == "channel":
            return "dynamic" if scheme.group_size is not None else "static"
    return None


def check_role(scheme: TensorScheme | None, role: str) -> TensorScheme | None:
    """Validate `scheme` for `role` and return it with an implied source filled in."""
    if role not in ROLES:
        raise ValueError(f"role: unknown role {role!r}.{did_you_mean(role, ROLES)} Valid: {choices(ROLES)}")
    _check_scheme_type(scheme, role)
    if scheme is None:
        return None
    g, fmt = scheme.granularity, scheme.format
    valid = ROLE_GRANULARITIES[role]
    if g == "block" and role in KV_ROLES:
        raise ValueError(
            f"{role}: the block formats ({choices(BLOCK_SIZES)}) are not supported for the KV cache, got {fmt!r}. "
            f"Valid {role} formats: int, {choices(FP8_FORMATS)}, nf4"
        )
    if g not in valid:
        raise ValueError(f"{role}: granularity {g!r} is not valid for {role}. Valid: {choices(valid)}")
    if role == "weights":
        if scheme.source is not None:
            raise ValueError(
                f"weights: source must be None (weight scales come from the weights), got {scheme.source!r}"
            )
        if g == "channel" and scheme.group_size is not None:
            raise ValueError(
                f"weights: per-channel (per output row) scales take no group size, got {scheme.group_size}; "
                "use granularity 'group' for groups along the input dim"
            )
        return scheme
    implied = implied_source(scheme, role)
    source = scheme.source or implied
    if source is None:
        raise ValueError(
            f"{role}: granularity {g!r} needs an explicit scale source. "
            f"Valid: {choices(s for s in SOURCES if g in SOURCE_GRANULARITIES[s])}"
        )
    if role == "activations" and source != implied:
        raise ValueError(
            f"activations: granularity {g!r} takes source {implied!r}, got {scheme.source!r}. Activations are "
            "dynamic per token / group / block, or static (calibrated) per tensor"
        )
    if scheme.clip != "absmax" and source in ("dynamic", "unit"):
        raise ValueError(
            f"{role}: clip {scheme.clip!r} needs scales computed from known data (weights); "
            f"{role} with {source} scales take only 'absmax'"
        )
    if scheme.clip != "absmax" and source == "static":
        raise ValueError(f"{role}: " + STATIC_CLIP_NOT_BUILT.format(clip=scheme.clip))
    return scheme if scheme.source is not None else dataclasses.replace(scheme, source=source)


# Calibration observes each tensor's range (min and max), so a static scale is absmax; a clipped
# one would need the calibration data itself. Refused rather than ignored.
STATIC_CLIP_NOT_BUILT = ("{clip!r} clipping on static (calibrated) scales is not built: calibration keeps each "
                         "tensor's observed range, so static scales are absmax. Drop the clip flag (clipping is "
                         "built for weights)")


@dataclass(frozen=True)
class LinearScheme:
    """What one phase (prefill or decode) does to the selected Linear layers."""

    weights: TensorScheme | None = None
    activations: TensorScheme | None = None

    def __post_init__(self):
        for role in LINEAR_ROLES:
            object.__setattr__(self, role, check_role(getattr(self, role), role))

    @property
    def is_noop(self) -> bool:
        return self.weights is None and self.activations is None


@dataclass(frozen=True)
class KVScheme:
    """How the KV cache is quantized; the `window` most recent tokens stay in full precision."""

    keys: TensorScheme | None = None
    values: TensorScheme | None = None
    window: int = 0

    def __post_init__(self):
        for role in KV_ROLES:
            object.__setattr__(self, role, check_role(getattr(self, role), role))
        if not (_is_int(self.window) and self.window >= 0):
            raise ValueError(
                f"window: must be a non-negative integer (tokens kept in full precision), got {self.window!r}"
            )
        if self.window > 0 and self.is_noop:
            raise ValueError(
                f"window: {self.window} keeps recent tokens in full precision but neither keys nor values are "
                "quantized; quantize the KV cache or use window 0"
            )

    @property
    def is_noop(self) -> bool:
        return self.keys is None and self.values is None


def _check_patterns(value: object, name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        raise ValueError(
            f"{name}: must be a tuple of fnmatch glob strings, got {type(value).__name__} {value!r}"
        )
    for p in value:
        if not isinstance(p, str) or not p:
            raise ValueError(f"{name}: patterns must be non-empty strings, got {p!r}")
        bad = [c for c in ("-", ",") if c in p] + (["whitespace"] if any(c.isspace() for c in p) else [])
        if bad:
            raise ValueError(
                f"{name}: pattern {p!r} contains {' and '.join(repr(b) if b != 'whitespace' else b for b in bad)}; "
                "module names never do ('-' separates spec parts, ',' separates patterns)"
            )
    return tuple(value)


@dataclass(frozen=True)
class QuantSpec:
    """How a model is quantized; `str(spec)` is its canonical, round-tripping spec string."""

    prefill: LinearScheme = LinearScheme()
    decode: LinearScheme = LinearScheme()
    kv: KVScheme = KVScheme()
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def __post_init__(self):
        for name, cls in (("prefill", LinearScheme), ("decode", LinearScheme), ("kv", KVScheme)):
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise ValueError(f"{name}: must be a {cls.__name__}, got {type(value).__name__} {value!r}")
        object.__setattr__(self, "include", _check_patterns(self.include, "include"))
        object.__setattr__(self, "exclude", _check_patterns(self.exclude, "exclude"))

    # --- construction --------------------------------------------------------------------
    @classmethod
    def uniform(
        cls,
        weights: TensorScheme | str | None = None,
        activations: TensorScheme | str | None = None,
        keys: TensorScheme | str | None = None,
        values: TensorScheme | str | None = None,
        window: int = 0,
        include=(),
        exclude=(),
    ) -> QuantSpec:
        """The same scheme in both phases; each scheme may be given as a fragment ("4g128", "8@dyn")."""

        def scheme(value, role):
            return TensorScheme.parse(value, role) if isinstance(value, str) else value

        phase = LinearScheme(scheme(weights, "weights"), scheme(activations, "activations"))
        kv = KVScheme(scheme(keys, "keys"), scheme(values, "values"), window)
        return cls(phase, phase, kv, tuple(include), tuple(exclude))

    @classmethod
    def parse(cls, text: str) -> QuantSpec:
        from qdrift.spec.grammar import parse_spec

        return parse_spec(text)

    def __str__(self) -> str:
        from qdrift.spec.grammar import format_spec

        return format_spec(self)

    # --- properties ------------------------------------------------------------------------
    @property
    def phase_split(self) -> bool:
        """Whether prefill (multi-token) and decode (single-token) forwards are quantized differently."""
        return self.prefill != self.decode

    @property
    def is_noop(self) -> bool:
        """Nothing is quantized (module patterns alone change nothing)."""
        return self.prefill.is_noop and self.decode.is_noop and self.kv.is_noop

    @property
    def per_forward(self) -> list[TensorScheme]:
        """The schemes applied as the model runs, not once to its weights: both phases' activations and
        the keys and values (those set)."""
        schemes = [self.prefill.activations, self.decode.activations, self.kv.keys, self.kv.values]
        return [s for s in schemes if s is not None]

    @property
    def hash(self) -> str:
        """First 12 hex digits of the sha256 of the canonical string: stable across runs, for cache keys."""
        return hashlib.sha256(str(self).encode()).hexdigest()[:12]

    def describe(self) -> str:
        """Multi-line plain-English summary for disclosure cards."""
        from qdrift.spec.describe import describe_spec

        return describe_spec(self)

    # --- dict / JSON / YAML ----------------------------------------------------------------
    def to_dict(self) -> dict:
        from qdrift.spec.serial import spec_to_dict

        return spec_to_dict(self)

    @classmethod
    def from_dict(cls, data) -> QuantSpec:
        from qdrift.spec.serial import spec_from_data

        return spec_from_data(data)

    def to_json(self, indent: int | None = None) -> str:
        import json

        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> QuantSpec:
        import json

        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"spec JSON: not valid JSON ({e})") from None
        return cls.from_dict(data)

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_yaml(cls, text: str) -> QuantSpec:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(f"spec YAML: not valid YAML ({e})") from None
        return cls.from_dict(data)
