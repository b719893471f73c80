"""The spec string: parse and print (the grammar is in the `qdrift.spec` docstring).

Parsing accepts non-canonical but valid input (explicit defaults, flags in any order, parts in
any order, missing w/a/kv parts, `kv:` written as equal `k:` and `v:`, `win0`, equal prefill and
decode schemes written with '/'); printing always gives the one canonical string.
"""

from __future__ import annotations

import re

from qdrift.spec.model import (
    BLOCK_SIZES,
    FIXED_BITS,
    FORMATS,
    KV_ROLES,
    MAX_BITS,
    MIN_BITS,
    ROLES,
    KVScheme,
    LinearScheme,
    QuantSpec,
    TensorScheme,
    check_role,
    choices,
    default_granularity,
    did_you_mean,
)

SOURCE_TOKENS = {"unit": "unit", "static": "static", "dyn": "dynamic"}
SOURCE_NAMES = {v: k for k, v in SOURCE_TOKENS.items()}
NAMED_FORMATS = tuple(f for f in FORMATS if f != "int")
FORMAT_HELP = f"{MIN_BITS}..{MAX_BITS} (integer bits), 16 (not quantized), {choices(NAMED_FORMATS)}"
GRANULARITY_HELP = {
    "weights": "t (tensor), c (per output channel, the default), g<N> (groups of N along the input dim)",
    "activations": "tok (dynamic per token, the default), g<N> (dynamic groups of N within a token), "
    "t (static per tensor)",
    "keys": "t (tensor, @unit or @static; the default for them), h (head, @static), tok (token, @dyn; "
    "the default for it), g<N> (group, @dyn), c (channel, @static), c<N> (channel in blocks of N tokens, @dyn)",
}
GRANULARITY_HELP["values"] = GRANULARITY_HELP["keys"]
FLAG_HELP = "z (zero-point), ~mse or ~p<percent> (clipping), ~sr<seed> (stochastic rounding)"
SOURCE_HELP = "@unit, @static, @dyn"
PART_HELP = "w<scheme>, a<scheme>, kv:<kvscheme> (or k:<kvscheme> and v:<kvscheme>), win<N>, only:<globs>, skip:<globs>"
# Part prefixes, in the order they are tried ("win" before "w", "kv:" before "k:").
PARTS = (
    ("win", "window"),
    ("only:", "include"),
    ("skip:", "exclude"),
    ("kv:", "kv"),
    ("k:", "keys"),
    ("v:", "values"),
    ("w", "weights"),
    ("a", "activations"),
)
PART_LABELS = {
    "window": "window",
    "include": "include (-only:)",
    "exclude": "exclude (-skip:)",
    "kv": "kv",
    "keys": "keys (k:)",
    "values": "values (v:)",
    "weights": "weights (w)",
    "activations": "activations (a)",
}

_INT = re.compile(r"\d+")
_WORD = re.compile(r"[a-z]+\d*(?:e\d+m\d+)?")
_GRANULARITY = re.compile(r"(tok|t|h|c|g)(\d*)")
_GRANULARITY_NAMES = {"t": "tensor", "tok": "token", "h": "head", "c": "channel", "g": "group"}
_FLAGS = (
    ("z", re.compile(r"z")),
    ("clip", re.compile(r"~(mse)")),
    ("clip", re.compile(r"~(p\d+(?:\.\d+)?)")),
    ("seed", re.compile(r"~sr(\d+)")),
)


def _match_flag(text: str) -> tuple[str | None, re.Match | None]:
    for name, pattern in _FLAGS:
        m = pattern.match(text)
        if m is not None:
            return name, m
    return None, None


def _strip_role(message: str, role: str) -> str:
    return message[len(role) + 2 :] if message.startswith(f"{role}: ") else message


def parse_scheme(text: str, role: str, label: str | None = None) -> TensorScheme | None:
    """One scheme fragment ("4g128z~mse", "fp8e4m3@unit", "16") for `role`; "16" gives None."""
    if role not in ROLES:
        raise ValueError(f"role: unknown role {role!r}.{did_you_mean(role, ROLES)} Valid: {choices(ROLES)}")
    label = label or f"{role} {text!r}"
    if not isinstance(text, str):
        raise ValueError(f"{label}: a scheme fragment must be a string, got {type(text).__name__}")

    def fail(message: str):
        raise ValueError(f"{label}: {message}")

    body, at, source_token = text.partition("@")
    source = None
    if at:
        if role == "weights":
            fail(f"weights take no '@{source_token}' scale source (their scales come from the weights)")
        source = SOURCE_TOKENS.get(source_token) or ("dynamic" if source_token == "dynamic" else None)
        if source is None:
            fail(
                f"unknown scale source '@{source_token}'.{did_you_mean(source_token, SOURCE_TOKENS)} "
                f"Valid: {SOURCE_HELP}, written last (after granularity and flags)"
            )
    if body == "16":
        if at:
            fail(f"'16' (not quantized) takes no '@{source_token}' scale source")
        return None
    if not body:
        fail(f"empty scheme. Valid: {FORMAT_HELP}")

    # Element format.
    m = _INT.match(body)
    if m is not None:
        fmt, bits, rest = "int", int(m.group()), body[m.end() :]
        if bits == 16:
            fail(f"'16' means not quantized and takes no granularity or flags, got {rest!r} after it")
        if not MIN_BITS <= bits <= MAX_BITS:
            fail(
                f"bits {m.group()} out of range. Valid: {MIN_BITS}..{MAX_BITS} (integer formats) or 16 (not quantized)"
            )
    else:
        fmt = next((f for f in sorted(NAMED_FORMATS, key=len, reverse=True) if body.startswith(f)), None)
        if fmt is None:
            w = _WORD.match(body)
            bad = w.group() if w else body
            fail(f"unknown format '{bad}'.{did_you_mean(bad, NAMED_FORMATS)} Valid: {FORMAT_HELP}")
        bits, rest = FIXED_BITS[fmt], body[len(fmt) :]

    # Granularity.
    granularity, group_size = None, None
    m = _GRANULARITY.match(rest)
    if m is not None:
        token, number = m.groups()
        if fmt in BLOCK_SIZES:
            fail(
                f"{fmt} has a fixed block of {BLOCK_SIZES[fmt]} and takes no granularity; remove {m.group()!r}"
            )
        if token in ("t", "tok", "h") and number:
            fail(f"granularity '{token}' takes no number, got {m.group()!r}. Valid: {GRANULARITY_HELP[role]}")
        if token == "g" and not number:
            fail(f"'g' needs a group size, e.g. 'g128'. Valid: {GRANULARITY_HELP[role]}")
        granularity = _GRANULARITY_NAMES[token]
        group_size = int(number) if number else None
        rest = rest[m.end() :]

    # Flags, in any order; each at most once.
    flags: dict[str, tuple[str, str]] = {}  # name -> (token, value)
    while rest:
        name, fm = _match_flag(rest)
        if fm is None:
            if rest.startswith("~p"):
                fail(f"clip percentile needs a number in (0, 100], e.g. '~p99.9', got {rest!r}")
            if rest.startswith("~sr"):
                fail(f"stochastic rounding needs a non-negative integer seed, e.g. '~sr7', got {rest!r}")
            where = f" after {body[: len(body) - len(rest)]!r}"
            fail(
                f"unexpected {rest!r}{where}. After the format come an optional granularity "
                f"({GRANULARITY_HELP[role] if fmt not in BLOCK_SIZES else 'none for ' + fmt}) "
                f"and then flags: {FLAG_HELP}"
            )
        if name in flags:
            fail(
                f"flag {fm.group()!r} repeats or conflicts with {flags[name][0]!r}; "
                f"give each of {FLAG_HELP} at most once"
            )
        flags[name] = (fm.group(), fm.group(fm.lastindex or 0))
        rest = rest[fm.end() :]
    symmetric = "z" not in flags
    clip = flags["clip"][1] if "clip" in flags else "absmax"
    seed = int(flags["seed"][1]) if "seed" in flags else None

    if role in KV_ROLES and source is None:
        fail(
            f"quantized {role} need an explicit scale source: append one of {SOURCE_HELP} "
            f"(e.g. '{text}@dyn'); '@unit' only for fp8 at tensor granularity"
        )
    if granularity is None:
        granularity = default_granularity(fmt, role, source)
    try:
        scheme = TensorScheme(fmt, bits, granularity, group_size, symmetric, source, clip, seed)
        return check_role(scheme, role)
    except ValueError as e:
        raise ValueError(f"{label}: {_strip_role(str(e), role)}") from None


def format_scheme(scheme: TensorScheme | None, role: str) -> str:
    """The canonical fragment of `scheme` for `role`; None prints "16"."""
    if scheme is None:
        return "16"
    fmt = str(scheme.bits) if scheme.format == "int" else scheme.format
    g, gs = scheme.granularity, scheme.group_size
    if scheme.format in BLOCK_SIZES:
        granularity = ""
    elif scheme.format == "nf4":
        granularity = f"g{gs}"
    else:
        if role == "activations":
            default = "token"
        else:
            default = default_granularity(scheme.format, role, scheme.source)
        if g == default and gs is None:
            granularity = ""
        else:
            token = {"tensor": "t", "token": "tok", "head": "h", "channel": "c", "group": "g"}[g]
            granularity = token + ("" if gs is None else str(gs))
    flags = ("" if scheme.symmetric else "z") + ("" if scheme.clip == "absmax" else f"~{scheme.clip}")
    flags += "" if scheme.seed is None else f"~sr{scheme.seed}"
    source = f"@{SOURCE_NAMES[scheme.source]}" if role in KV_ROLES and scheme.source is not None else ""
    return f"{fmt}{granularity}{flags}{source}"


def _phased(body: str, role: str, part: str) -> tuple[TensorScheme | None, TensorScheme | None]:
    pieces = body.split("/")
    if len(pieces) > 2:
        raise ValueError(
            f"{role} in part {part!r}: at most one '/' (prefill/decode), got {len(pieces)} schemes"
        )
    if len(pieces) == 1:
        scheme = parse_scheme(body, role, f"{role} in part {part!r}")
        return scheme, scheme
    prefill = parse_scheme(pieces[0], role, f"prefill {role} in part {part!r}")
    decode = parse_scheme(pieces[1], role, f"decode {role} in part {part!r}")
    return prefill, decode


def _kv(body: str, role: str, part: str, name: str | None = None) -> TensorScheme | None:
    label = f"{name or role} in part {part!r}"
    if "/" in body:
        raise ValueError(
            f"{label}: the KV cache has no prefill/decode split ('/'); one scheme serves both phases"
        )
    return parse_scheme(body, role, label)


def _globs(body: str, field: str, part: str) -> tuple[str, ...]:
    globs = tuple(body.split(","))
    if any(not g for g in globs):
        raise ValueError(
            f"{field} in part {part!r}: empty glob. Give comma-separated fnmatch globs on module names, "
            f"e.g. '{part.split(':')[0]}:model.layers.*,lm_head'"
        )
    return globs


def _classify(part: str) -> tuple[str | None, str]:
    for prefix, key in PARTS:
        if part.startswith(prefix):
            return key, part[len(prefix) :]
    return None, part


def parse_spec(text: str) -> QuantSpec:
    """Parse a spec string (canonical or not) into a validated QuantSpec."""
    if not isinstance(text, str):
        raise ValueError(f"spec: must be a string, got {type(text).__name__} {text!r}")
    s = text.strip()
    if not s:
        raise ValueError(f"spec: empty string. The no-op spec is 'w16-a16-kv:16'; parts: {PART_HELP}")
    seen: dict[str, str] = {}
    for part in s.split("-"):
        if not part:
            raise ValueError(
                f"spec {text!r}: empty part (a leading, trailing or doubled '-'). Valid parts: {PART_HELP}"
            )
        key, _ = _classify(part)
        if key is None:
            hint = did_you_mean(part, ("w16", "a16", "kv:16", "win128", "only:", "skip:"))
            raise ValueError(f"spec {text!r}: unknown part {part!r}.{hint} Valid parts: {PART_HELP}")
        if key in seen:
            raise ValueError(
                f"spec {text!r}: duplicate {PART_LABELS[key]} part {part!r} (already given as {seen[key]!r}); "
                "each part appears at most once"
            )
        if (key == "kv" and ({"keys", "values"} & seen.keys())) or (key in KV_ROLES and "kv" in seen):
            other = seen.get("kv") or seen.get("keys") or seen.get("values")
            raise ValueError(
                f"spec {text!r}: part {part!r} conflicts with {other!r}: use 'kv:' when keys and values share "
                "a scheme, else 'k:' and 'v:'"
            )
        seen[key] = part

    def body(key: str) -> str | None:
        return _classify(seen[key])[1] if key in seen else None

    weights = _phased(body("weights"), "weights", seen["weights"]) if "weights" in seen else (None, None)
    acts = (
        _phased(body("activations"), "activations", seen["activations"])
        if "activations" in seen
        else (None, None)
    )
    if "kv" in seen:
        keys = values = _kv(body("kv"), "keys", seen["kv"], "keys and values")
    else:
        keys = _kv(body("keys"), "keys", seen["keys"]) if "keys" in seen else None
        values = _kv(body("values"), "values", seen["values"]) if "values" in seen else None
    window = 0
    if "window" in seen:
        if not _INT.fullmatch(body("window")):
            raise ValueError(
                f"window in part {seen['window']!r}: expected 'win<N>' with N a non-negative number of tokens, e.g. 'win128'"
            )
        window = int(body("window"))
    include = _globs(body("include"), "include", seen["include"]) if "include" in seen else ()
    exclude = _globs(body("exclude"), "exclude", seen["exclude"]) if "exclude" in seen else ()
    try:
        return QuantSpec(
            prefill=LinearScheme(weights[0], acts[0]),
            decode=LinearScheme(weights[1], acts[1]),
            kv=KVScheme(keys, values, window),
            include=include,
            exclude=exclude,
        )
    except ValueError as e:
        raise ValueError(f"spec {text!r}: {e}") from None


def format_spec(spec: QuantSpec) -> str:
    """The canonical spec string."""

    def phased(role: str) -> str:
        p, d = getattr(spec.prefill, role), getattr(spec.decode, role)
        return format_scheme(p, role) if p == d else f"{format_scheme(p, role)}/{format_scheme(d, role)}"

    parts = [f"w{phased('weights')}", f"a{phased('activations')}"]
    kv = spec.kv
    if kv.keys == kv.values:
        parts.append(f"kv:{format_scheme(kv.keys, 'keys')}")
    else:
        parts += [f"k:{format_scheme(kv.keys, 'keys')}", f"v:{format_scheme(kv.values, 'values')}"]
    if kv.window:
        parts.append(f"win{kv.window}")
    if spec.include:
        parts.append("only:" + ",".join(spec.include))
    if spec.exclude:
        parts.append("skip:" + ",".join(spec.exclude))
    return "-".join(parts)
