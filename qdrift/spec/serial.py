"""The dict form of a spec (JSON and YAML go through it): plain nested dicts, lists and None.

`from_dict` is strict: an unknown key is an error naming it and the valid keys; a missing key
takes its default. It also takes the short form {"spec": "<string>"} or a bare spec string, and,
in place of a scheme dict, a scheme fragment ("4g128", "fp8e4m3@unit"). A scheme dict may leave
out `bits` for the fixed-width formats and `granularity` where the role implies it.
"""

from __future__ import annotations

import dataclasses

from qdrift.spec.model import (
    FIXED_BITS,
    FORMATS,
    KV_ROLES,
    LINEAR_ROLES,
    KVScheme,
    LinearScheme,
    QuantSpec,
    TensorScheme,
    check_role,
    choices,
    default_granularity,
    did_you_mean,
)

SPEC_KEYS = ("prefill", "decode", "kv", "include", "exclude")
PHASE_KEYS = LINEAR_ROLES
KV_KEYS = (*KV_ROLES, "window")
SCHEME_KEYS = tuple(f.name for f in dataclasses.fields(TensorScheme))


def _check_keys(data: object, valid: tuple[str, ...], where: str, extra: str = "") -> dict:
    if not isinstance(data, dict):
        raise ValueError(
            f"{where}: expected a mapping with keys {choices(valid)}{extra}, got {type(data).__name__} {data!r}"
        )
    for key in data:
        if key not in valid:
            raise ValueError(
                f"{where}: unknown key {key!r}.{did_you_mean(key, valid)} Valid keys: {choices(valid)}{extra}"
            )
    return data


def scheme_to_dict(scheme: TensorScheme | None) -> dict | None:
    return None if scheme is None else dataclasses.asdict(scheme)


def scheme_from_dict(data: object, role: str, where: str | None = None) -> TensorScheme | None:
    """A TensorScheme (validated for `role`) from its dict, a fragment string, or None."""
    from qdrift.spec.grammar import parse_scheme

    where = where or role
    if data is None:
        return None
    if isinstance(data, str):
        return parse_scheme(data, role, f"{where} {data!r}")
    fields = dict(_check_keys(data, SCHEME_KEYS, where))
    fmt = fields.get("format")
    if "format" not in fields:
        raise ValueError(f"{where}: missing key 'format'. Valid formats: {choices(FORMATS)}")
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ValueError(
            f"{where}: unknown format {fmt!r}.{did_you_mean(fmt, FORMATS)} Valid: {choices(FORMATS)}"
        )
    if "bits" not in fields:
        if fmt not in FIXED_BITS:
            raise ValueError(f"{where}: missing key 'bits' (format 'int' takes 2..8)")
        fields["bits"] = FIXED_BITS[fmt]
    if "granularity" not in fields:
        granularity = default_granularity(fmt, role, fields.get("source"))
        if granularity is None:
            raise ValueError(
                f"{where}: missing keys 'granularity' and 'source' (quantized {role} need a source)"
            )
        fields["granularity"] = granularity
    try:
        return check_role(TensorScheme(**fields), role)
    except ValueError as e:
        message = str(e)
        raise ValueError(
            f"{where}: {message[len(role) + 2 :] if message.startswith(role + ': ') else message}"
        ) from None


def _phase(data: object, name: str) -> LinearScheme:
    if data is None:
        return LinearScheme()
    _check_keys(data, PHASE_KEYS, name)
    return LinearScheme(*(scheme_from_dict(data.get(r), r, f"{name}.{r}") for r in PHASE_KEYS))


def _kv(data: object) -> KVScheme:
    if data is None:
        return KVScheme()
    _check_keys(data, KV_KEYS, "kv")
    keys, values = (scheme_from_dict(data.get(r), r, f"kv.{r}") for r in KV_ROLES)
    try:
        return KVScheme(keys, values, data.get("window", 0))
    except ValueError as e:
        raise ValueError(f"kv.{e}") from None


def _patterns(data: object, name: str) -> tuple:
    if data is None:
        return ()
    if isinstance(data, str):
        return (data,)
    if not isinstance(data, (list, tuple)):
        raise ValueError(
            f"{name}: expected a list of fnmatch glob strings, got {type(data).__name__} {data!r}"
        )
    return tuple(data)


def spec_to_dict(spec: QuantSpec) -> dict:
    def phase(p: LinearScheme) -> dict:
        return {r: scheme_to_dict(getattr(p, r)) for r in PHASE_KEYS}

    return {
        "prefill": phase(spec.prefill),
        "decode": phase(spec.decode),
        "kv": {
            "keys": scheme_to_dict(spec.kv.keys),
            "values": scheme_to_dict(spec.kv.values),
            "window": spec.kv.window,
        },
        "include": list(spec.include),
        "exclude": list(spec.exclude),
    }


def spec_from_data(data: object) -> QuantSpec:
    """A QuantSpec from its dict form, the short form {"spec": "<string>"}, or a bare spec string."""
    if isinstance(data, str):
        return QuantSpec.parse(data)
    short = " (or the short form {'spec': '<string>'})"
    if isinstance(data, dict) and "spec" in data:
        if len(data) != 1 or not isinstance(data["spec"], str):
            raise ValueError(
                "spec: the short form is exactly {'spec': '<string>'}, got "
                f"{data!r}; give either the string or the keys {choices(SPEC_KEYS)}"
            )
        return QuantSpec.parse(data["spec"])
    _check_keys(data, SPEC_KEYS, "spec", short)
    return QuantSpec(
        prefill=_phase(data.get("prefill"), "prefill"),
        decode=_phase(data.get("decode"), "decode"),
        kv=_kv(data.get("kv")),
        include=_patterns(data.get("include"), "include"),
        exclude=_patterns(data.get("exclude"), "exclude"),
    )
