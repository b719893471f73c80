"""The declarative quantization spec: canonical strings, validation, dict/JSON/YAML, hashing, cards."""

import hashlib
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qdrift.spec import (
    FORMATS,
    GRANULARITIES,
    ROLES,
    SOURCES,
    KVScheme,
    LinearScheme,
    QuantSpec,
    TensorScheme,
)
from qdrift.spec.model import check_role

ROOT = Path(__file__).resolve().parents[1]

CANONICAL = [
    "w16-a16-kv:16",
    "w8-a16-kv:16",
    "w8t-a8t-kv:16",
    "w4g128-a16-kv:16",
    "w4g128z-a16-kv:16",
    "w4g128z~mse-a16-kv:16",
    "w3g64~p99.9~sr7-a16-kv:16",
    "wfp8e4m3-afp8e4m3-kv:fp8e4m3@unit",
    "wfp8e4m3t-afp8e4m3t-kv:fp8e4m3@static",
    "w16-a16-kv:fp8e4m3h@static",
    "w16-a16-kv:fp8e5m2@unit",
    "wnf4g64-a16-kv:16",
    "wmxfp4-amxfp8-kv:16",
    "wnvfp4-anvfp4-kv:16",
    "w8-a8-kv:8@dyn",
    "w16-a16-kv:4g32z@dyn",
    "w16-a16-k:2c32z@dyn-v:2g32z@dyn-win128",
    "w16-a16-k:8c@static-v:8@dyn",
    "wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit",
    "w4g128-a16-kv:16-only:*.mlp.*",
    "w8-a16-kv:16-only:lm_head,model.layers.*-skip:*.o_proj",
]


# --- round trips ---------------------------------------------------------------------------------
@pytest.mark.parametrize("text", CANONICAL)
def test_canonical_string_round_trips_exactly(text):
    spec = QuantSpec.parse(text)
    assert str(spec) == text
    assert QuantSpec.parse(str(spec)) == spec


@pytest.mark.parametrize("text", CANONICAL)
def test_json_round_trip_gives_an_equal_spec(text):
    spec = QuantSpec.parse(text)
    encoded = spec.to_json()
    assert isinstance(json.loads(encoded), dict)
    assert QuantSpec.from_json(encoded) == spec
    assert QuantSpec.from_json(spec.to_json(indent=2)) == spec


@pytest.mark.parametrize("text", CANONICAL)
def test_yaml_round_trip_gives_an_equal_spec(text):
    spec = QuantSpec.parse(text)
    assert QuantSpec.from_yaml(spec.to_yaml()) == spec


@pytest.mark.parametrize("text", CANONICAL)
def test_dict_form_is_plain_data_and_round_trips(text):
    spec = QuantSpec.parse(text)
    data = spec.to_dict()

    def plain(x):
        if isinstance(x, dict):
            return all(isinstance(k, str) and plain(v) for k, v in x.items())
        if isinstance(x, list):
            return all(plain(v) for v in x)
        return x is None or isinstance(x, (str, int, bool))

    assert plain(data)
    assert QuantSpec.from_dict(data) == spec
    assert QuantSpec.from_dict(json.loads(json.dumps(data))) == spec


def test_dict_form_mirrors_the_dataclasses():
    data = QuantSpec.parse("w4g128z-a8-kv:16-only:*.mlp.*").to_dict()
    assert set(data) == {"prefill", "decode", "kv", "include", "exclude"}
    assert data["prefill"]["weights"] == {
        "format": "int",
        "bits": 4,
        "granularity": "group",
        "group_size": 128,
        "symmetric": False,
        "source": None,
        "clip": "absmax",
        "seed": None,
    }
    assert data["prefill"]["activations"]["source"] == "dynamic"
    assert data["kv"] == {"keys": None, "values": None, "window": 0}
    assert data["include"] == ["*.mlp.*"] and data["exclude"] == []


def _valid_schemes(role):
    """Every valid TensorScheme for `role` over a small grid of field values."""
    grid = itertools.product(
        FORMATS, (2, 4, 8), GRANULARITIES, (None, 32, 64), (True, False), (None, *SOURCES),
        ("absmax", "mse", "p99.9"), (None, 7),
    )  # fmt: skip
    found = set()
    for fields in grid:
        try:
            found.add(check_role(TensorScheme(*fields), role))
        except ValueError:
            pass
    return sorted(found, key=repr)


@pytest.mark.parametrize("role", ROLES)
def test_every_valid_scheme_round_trips_through_its_fragment(role):
    schemes = _valid_schemes(role)
    assert len(schemes) > 20
    for s in schemes:
        assert TensorScheme.parse(s.to_string(role), role) == s, s
        assert TensorScheme.parse(str(s), role) == s, s
        assert TensorScheme.from_dict(s.to_dict(), role) == s, s


def test_every_valid_spec_over_a_grid_round_trips():
    weights = [None, *_valid_schemes("weights")[::37]]
    acts = [None, *_valid_schemes("activations")[::23]]
    kv = [None, *_valid_schemes("keys")[::11]]
    for w, a, k, v in itertools.product(weights[:6], acts[:6], kv[:6], kv[:6]):
        spec = QuantSpec(
            LinearScheme(w, a), LinearScheme(weights[1], None), KVScheme(k, v, 16 if (k or v) else 0)
        )
        assert QuantSpec.parse(str(spec)) == spec, str(spec)
        assert QuantSpec.from_yaml(spec.to_yaml()) == spec


# --- canonicalisation ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, canonical",
    [
        ("a16-kv:16-w4g128", "w4g128-a16-kv:16"),
        ("w8c-a16", "w8-a16-kv:16"),
        ("w8", "w8-a16-kv:16"),
        ("kv:16", "w16-a16-kv:16"),
        ("a8tok", "w16-a8-kv:16"),
        ("a8@static", "w16-a8t-kv:16"),
        ("afp8e4m3@dyn", "w16-afp8e4m3-kv:16"),
        ("kv:8tok@dyn", "w16-a16-kv:8@dyn"),
        ("kv:8t@static", "w16-a16-kv:8@static"),
        ("kv:fp8e4m3t@unit", "w16-a16-kv:fp8e4m3@unit"),
        ("kv:4c32@dynamic", "w16-a16-kv:4c32@dyn"),
        ("wnf4", "wnf4g64-a16-kv:16"),
        ("w3g64~sr7~p99.9", "w3g64~p99.9~sr7-a16-kv:16"),
        ("w4g128~sr3~msez", "w4g128z~mse~sr3-a16-kv:16"),
        ("w4~p099.90", "w4~p99.9-a16-kv:16"),
        ("w4~p100.0", "w4~p100-a16-kv:16"),
        ("w8/8-a16/16", "w8-a16-kv:16"),
        ("k:8@dyn-v:8@dyn", "w16-a16-kv:8@dyn"),
        ("k:8@dyn", "w16-a16-k:8@dyn-v:16"),
        ("kv:fp8e4m3@unit-win0", "w16-a16-kv:fp8e4m3@unit"),
        ("skip:*.o_proj-win4-kv:8@dyn-only:model.layers.*-a16-w8", "w8-a16-kv:8@dyn-win4-only:model.layers.*-skip:*.o_proj"),
        ("  w8-a16-kv:16 ", "w8-a16-kv:16"),
    ],
)  # fmt: skip
def test_non_canonical_input_parses_to_the_same_spec_and_prints_canonically(text, canonical):
    spec = QuantSpec.parse(text)
    assert str(spec) == canonical
    assert spec == QuantSpec.parse(canonical)


def test_short_and_string_forms_are_accepted_by_from_dict_json_and_yaml():
    spec = QuantSpec.parse("w4g128-a16-kv:fp8e4m3@unit")
    assert QuantSpec.from_dict({"spec": "w4g128-a16-kv:fp8e4m3@unit"}) == spec
    assert QuantSpec.from_dict("w4g128-kv:fp8e4m3@unit") == spec
    assert QuantSpec.from_json('{"spec": "w4g128-a16-kv:fp8e4m3@unit"}') == spec
    assert QuantSpec.from_json('"w4g128-a16-kv:fp8e4m3@unit"') == spec
    assert QuantSpec.from_yaml("spec: w4g128-a16-kv:fp8e4m3@unit\n") == spec
    assert QuantSpec.from_yaml("w4g128-a16-kv:fp8e4m3@unit\n") == spec


def test_from_dict_fills_missing_keys_with_defaults():
    assert QuantSpec.from_dict({}) == QuantSpec()
    assert QuantSpec.from_dict({"kv": None, "prefill": None}) == QuantSpec()
    partial = {
        "prefill": {"weights": {"format": "int", "bits": 4, "granularity": "group", "group_size": 128}},
        "decode": {"weights": "4g128"},
        "kv": {"keys": {"format": "fp8e4m3", "source": "unit"}, "values": "fp8e4m3@unit"},
        "include": "model.layers.*",
    }
    assert str(QuantSpec.from_dict(partial)) == "w4g128-a16-kv:fp8e4m3@unit-only:model.layers.*"
    assert QuantSpec.from_dict({"prefill": {"weights": {"format": "nf4"}}}).prefill.weights.group_size == 64


def test_yaml_config_written_by_hand_loads():
    text = """
prefill:
  weights: {format: fp8e4m3, granularity: channel}
  activations: {format: fp8e4m3, granularity: token}
decode:
  weights: 4g128
kv:
  keys: fp8e4m3@unit
  values: fp8e4m3@unit
"""
    assert str(QuantSpec.from_yaml(text)) == "wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit"


# --- objects -------------------------------------------------------------------------------------
def test_fixed_formats_fill_in_bits_and_blocks():
    spec = QuantSpec.parse("wmxfp4-anvfp4-kv:16")
    assert spec.prefill.weights == TensorScheme("mxfp4", 4, "block", 32)
    assert spec.prefill.activations == TensorScheme("nvfp4", 4, "block", 16, source="dynamic")
    assert TensorScheme("mxfp8", 8, "block").group_size == 32
    assert TensorScheme("nf4", 4, "group").group_size == 64


def test_containers_fill_in_the_source_the_granularity_implies():
    act = LinearScheme(activations=TensorScheme("int", 8, "token")).activations
    assert act.source == "dynamic"
    assert LinearScheme(activations=TensorScheme("int", 8, "tensor")).activations.source == "static"
    kv = KVScheme(keys=TensorScheme("int", 2, "channel", 32), values=TensorScheme("int", 8, "head"))
    assert (kv.keys.source, kv.values.source) == ("dynamic", "static")
    assert str(QuantSpec(kv=kv)) == "w16-a16-k:2c32@dyn-v:8h@static"


@pytest.mark.parametrize(
    "text, number_format, rounding",
    [("w4g128", "int4", "nearest"), ("w4g128z", "uint4", "nearest"), ("w3~sr1", "int3", "stochastic"),
     ("wfp8e5m2", "fp8e5m2", "nearest"), ("wnf4g64", "nf4", "nearest"), ("wmxfp4", "mxfp4", "nearest"),
     ("wnvfp4~sr0", "nvfp4", "stochastic")],
)  # fmt: skip
def test_number_format_and_rounding(text, number_format, rounding):
    scheme = QuantSpec.parse(text).prefill.weights
    assert (scheme.number_format, scheme.rounding) == (number_format, rounding)


def test_uniform_uses_the_same_scheme_in_both_phases():
    spec = QuantSpec.uniform(weights="4g128", activations=TensorScheme("int", 8, "token"), keys="fp8e4m3@unit",
                             values="fp8e4m3@unit", window=8, include=["*.mlp.*"])  # fmt: skip
    assert str(spec) == "w4g128-a8-kv:fp8e4m3@unit-win8-only:*.mlp.*"
    assert not spec.phase_split and spec.prefill == spec.decode
    assert QuantSpec.uniform() == QuantSpec() == QuantSpec.parse("w16-a16-kv:16")


def test_phase_split_and_is_noop():
    assert QuantSpec.parse("wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit").phase_split
    assert not QuantSpec.parse("w4g128-a8-kv:8@dyn").phase_split
    assert QuantSpec().is_noop and QuantSpec.parse("w16-a16-kv:16-only:lm_head").is_noop
    for text in ("w8", "a8", "k:8@dyn", "w16/4"):
        assert not QuantSpec.parse(text).is_noop


def test_specs_are_frozen_and_hashable():
    spec = QuantSpec.parse("w4g128-a16-kv:16")
    with pytest.raises(AttributeError):
        spec.include = ("x",)
    assert {spec: 1}[QuantSpec.parse("a16-w4g128")] == 1
    assert isinstance(spec.include, tuple) and isinstance(QuantSpec(include=["a"]).include, tuple)


# --- hash ----------------------------------------------------------------------------------------
def test_hash_is_stable_across_processes_and_releases():
    spec = QuantSpec.parse("w4g128-a16-kv:fp8e4m3@unit")
    # Pinned: a change here invalidates every cache key; change it only with the canonical form.
    assert spec.hash == "e914da41effa" == hashlib.sha256(b"w4g128-a16-kv:fp8e4m3@unit").hexdigest()[:12]
    out = subprocess.run(
        [sys.executable, "-c", "from qdrift.spec import QuantSpec; print(QuantSpec.parse('kv:fp8e4m3@unit-w4g128').hash)"],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    assert out.stdout.strip() == spec.hash


def test_different_specs_have_different_hashes():
    hashes = {QuantSpec.parse(t).hash for t in CANONICAL}
    assert len(hashes) == len(CANONICAL)
    assert all(len(h) == 12 and int(h, 16) >= 0 for h in hashes)
    assert QuantSpec.parse("w8c-a16").hash == QuantSpec.parse("w8").hash


# --- describe ------------------------------------------------------------------------------------
def test_describe_names_the_key_facts():
    scheme = QuantSpec.parse("w4g128").prefill.weights
    assert scheme.describe() == (
        "weights: int4, symmetric, groups of 128 along the input dim, round-to-nearest-even, absmax scales"
    )
    card = QuantSpec.parse("wfp8e4m3/4g128z~mse-afp8e4m3/16-k:2c32z@dyn-v:2g32~sr7@dyn-win128-skip:*.o_proj")
    text = card.describe()
    for fact in ("prefill weights: FP8 E4M3", "decode weights: int4, asymmetric (zero-point)", "MSE",
                 "decode activations (inputs of the selected Linears): not quantized", "blocks of 32 tokens",
                 "groups of 32 along head_dim", "stochastic rounding (seed 7)", "128 most recent tokens",
                 "*.o_proj", card.hash, str(card)):  # fmt: skip
        assert fact in text, fact
    assert len(text.splitlines()) >= 8
    unit = QuantSpec.parse("w4~p99.9-a8t-kv:fp8e4m3@unit").describe()
    assert "unit scales" in unit and "99.9th-percentile" in unit and "static" in unit
    assert "nothing is quantized" in QuantSpec().describe()


# --- validation: strings -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, fragments",
    [
        ("w1", ["weights", "'w1'", "bits 1", "2..8"]),
        ("w9", ["weights", "bits 9", "2..8", "16 (not quantized)"]),
        ("wfp9", ["weights", "unknown format 'fp9'", "Did you mean 'fp8e4m3'?", "nf4", "mxfp4"]),
        ("w4g0", ["weights", "'w4g0'", "positive", "got 0"]),
        ("w4x", ["weights", "unexpected 'x'", "g<N>", "~mse"]),
        ("a4z~mse", ["activations", "'a4z~mse'", "'mse'", "dynamic", "absmax"]),
        ("kv:fp8e4m3", ["keys and values", "'kv:fp8e4m3'", "source", "@unit", "@static", "@dyn"]),
        ("kv:8@unit", ["'kv:8@unit'", "'unit'", "fp8", "tensor granularity"]),
        ("kv:fp8e4m3h@dyn", ["'kv:fp8e4m3h@dyn'", "'head'", "'static'", "dynamic"]),
        ("wmxfp4g32", ["weights", "mxfp4", "fixed block of 32", "'g32'"]),
        ("wfp8e4m3z", ["weights", "zero-point", "'int'", "fp8e4m3"]),
        ("w4g128-w8", ["duplicate", "weights", "'w8'", "'w4g128'"]),
        ("w4g128-kv:16-win64", ["window", "64", "keys", "values"]),
        ("w8-a16-kv:16-only:", ["include", "'only:'", "empty glob"]),
        ("w8-a16-kv:16-only:a,,b", ["include", "empty glob", "comma-separated"]),
        ("w8-a16-kv:16-skip:a,", ["exclude", "empty glob"]),
        ("", ["empty", "w16-a16-kv:16"]),
        ("w8--a16", ["empty part"]),
        ("x8", ["unknown part 'x8'", "w<scheme>", "only:<globs>"]),
        ("kv16", ["unknown part 'kv16'", "Did you mean 'kv:16'?"]),
        ("kv:8@dyn-k:8@dyn", ["conflicts", "'kv:8@dyn'", "'k:'"]),
        ("w8/4/2", ["weights", "at most one '/'"]),
        ("kv:8@dyn/4@dyn", ["no prefill/decode split"]),
        ("w8@dyn", ["weights take no '@dyn'"]),
        ("w16g128", ["'16' means not quantized"]),
        ("w4g", ["'g' needs a group size"]),
        ("w4zz", ["'z' repeats"]),
        ("w4~mse~p99", ["'~p99'", "conflicts", "'~mse'"]),
        ("w4~p", ["percentile", "(0, 100]"]),
        ("w4~p100.5", ["clip", "'p100.5'", "0 < percent <= 100"]),
        ("w4~sr", ["seed", "~sr7"]),
        ("winx", ["window", "'winx'", "win<N>"]),
        ("kv:8@foo", ["unknown scale source '@foo'", "@unit, @static, @dyn"]),
        ("a8c", ["activations", "'channel'", "token, group, tensor"]),
        ("a8g32@static", ["activations", "'static'", "'group'"]),
        ("kv:8c@dyn", ["token block length"]),
        ("kv:8c32@static", ["static", "no group size", "32"]),
        ("kv:8@static~mse", ["'@static~mse'", "written last"]),
        ("kv:8~mse@static", ["keys", "'mse'", "static (calibrated) scales is not built", "absmax"]),
        ("w16-a8t~p99.9", ["activations", "'p99.9'", "static (calibrated) scales is not built"]),
        ("kv:fp8e4m3~mse@unit", ["'mse'", "absmax"]),
        ("kv:8~mse@dyn", ["'mse'", "dynamic", "absmax"]),
        ("kv:mxfp4@dyn", ["keys", "not supported for the KV cache", "mxfp4"]),
        ("w4c32", ["weights", "per-channel", "no group size", "'group'"]),
        ("w4h", ["weights", "'head'", "tensor, channel, group"]),
        ("wnf4c", ["nf4 must be 'group'"]),
        ("wnf4z", ["zero-point", "'nf4'"]),
        ("wfp8", ["unknown format 'fp8'", "Did you mean 'fp8e4m3'?"]),
        ("w4g128~mse z", ["unexpected ' z'"]),
    ],
)  # fmt: skip
def test_bad_strings_raise_value_errors_naming_part_token_and_choices(text, fragments):
    with pytest.raises(ValueError) as info:
        QuantSpec.parse(text)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_parse_rejects_non_strings():
    with pytest.raises(ValueError, match="must be a string"):
        QuantSpec.parse(8)
    with pytest.raises(ValueError, match="unknown role 'weight'. Did you mean 'weights'"):
        TensorScheme.parse("8", "weight")


# --- validation: objects -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fields, fragments",
    [
        (("int", 1, "channel"), ["bits", "1", "2..8"]),
        (("int", 9, "channel"), ["bits", "9", "2..8"]),
        (("int", True, "channel"), ["bits", "integer"]),
        (("fp9", 8, "tensor"), ["format", "unknown format 'fp9'", "Did you mean 'fp8e4m3'?", "Valid: int, fp8e4m3"]),
        (("fp8e4m3", 4, "tensor"), ["bits", "fp8e4m3", "fixed 8", "got 4"]),
        (("nf4", 8, "group"), ["bits", "nf4", "fixed 4"]),
        (("int", 4, "chanel"), ["granularity", "'chanel'", "Did you mean 'channel'?", "tensor, channel"]),
        (("mxfp4", 4, "group", 32), ["granularity", "mxfp4", "'block'"]),
        (("int", 4, "block"), ["granularity", "'block'", "mxfp4, mxfp8, nvfp4", "'int'"]),
        (("nf4", 4, "channel"), ["granularity", "nf4 must be 'group'", "64"]),
        (("mxfp4", 4, "block", 16), ["group_size", "fixed block of 32", "16"]),
        (("int", 4, "group"), ["group_size", "'group'", "positive"]),
        (("int", 4, "group", 0), ["group_size", "positive", "0"]),
        (("int", 4, "group", -8), ["group_size", "positive", "-8"]),
        (("int", 4, "tensor", 32), ["group_size", "'tensor'", "None"]),
        (("fp8e4m3", 8, "tensor", None, False), ["symmetric", "'int'", "'fp8e4m3'"]),
        (("int", 4, "tensor", None, 0), ["symmetric", "True or False"]),
        (("int", 4, "token", None, True, "dyn"), ["source", "'dyn'", "Did you mean 'dynamic'?", "static, unit"]),
        (("int", 8, "tensor", None, True, "unit"), ["source", "'unit'", "fp8", "tensor granularity", "'int'"]),
        (("fp8e4m3", 8, "head", None, True, "unit"), ["source", "'unit'", "'head'", "'static'"]),
        (("int", 8, "token", None, True, "dynamic", "mse"), ["clip", "'mse'", "dynamic", "absmax"]),
        (("int", 8, "channel", None, True, None, "max"), ["clip", "'max'", "'absmax', 'mse', 'p<percent>'"]),
        (("int", 8, "channel", None, True, None, "p0"), ["clip", "0 < percent <= 100"]),
        (("int", 8, "channel", None, True, None, "absmax", -1), ["seed", "non-negative", "-1"]),
        (("int", 8, "channel", None, True, None, "absmax", 1.5), ["seed", "1.5"]),
        (("int", 8, "channel", None, True, "dynamic"), ["group_size", "token block length"]),
    ],
)  # fmt: skip
def test_invalid_tensor_schemes_raise_value_errors_naming_field_value_and_choices(fields, fragments):
    with pytest.raises(ValueError) as info:
        TensorScheme(*fields)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


@pytest.mark.parametrize(
    "make, fragments",
    [
        (lambda: LinearScheme(weights=TensorScheme("int", 8, "token", source="dynamic")),
         ["weights", "'token'", "tensor, channel, group, block"]),
        (lambda: LinearScheme(weights=TensorScheme("int", 8, "tensor", source="static")), ["weights", "source", "None"]),
        (lambda: LinearScheme(weights=TensorScheme("int", 8, "channel", 32)), ["weights", "per-channel", "32"]),
        (lambda: LinearScheme(activations=TensorScheme("int", 8, "channel")),
         ["activations", "'channel'", "token, group, tensor, block"]),
        (lambda: LinearScheme(activations=TensorScheme("fp8e4m3", 8, "tensor", source="unit")),
         ["activations", "'tensor'", "'unit'", "'static'"]),
        (lambda: LinearScheme(activations=TensorScheme("int", 8, "token", clip="mse")),
         ["activations", "'mse'", "dynamic", "absmax"]),
        (lambda: LinearScheme(weights="4g128"), ["weights", "TensorScheme", "TensorScheme.parse('4g128', 'weights')"]),
        (lambda: KVScheme(keys=TensorScheme("int", 8, "tensor")), ["keys", "'tensor'", "source", "static, unit"]),
        (lambda: KVScheme(values=TensorScheme("int", 8, "head", source="dynamic")), ["'dynamic'", "'head'"]),
        (lambda: KVScheme(keys=TensorScheme("nvfp4", 4, "block")), ["keys", "not supported", "nvfp4"]),
        (lambda: KVScheme(window=4), ["window", "4", "neither keys nor values"]),
        (lambda: KVScheme(keys=TensorScheme("int", 8, "token"), window=-1), ["window", "non-negative", "-1"]),
        (lambda: QuantSpec(prefill="w8"), ["prefill", "LinearScheme", "str"]),
        (lambda: QuantSpec(include="model.*"), ["include", "tuple", "str"]),
        (lambda: QuantSpec(include=("",)), ["include", "non-empty"]),
        (lambda: QuantSpec(include=(3,)), ["include", "non-empty strings", "3"]),
        (lambda: QuantSpec(include=("model.layers-1",)), ["include", "'model.layers-1'", "'-'"]),
        (lambda: QuantSpec(exclude=("a,b",)), ["exclude", "'a,b'", "','"]),
        (lambda: QuantSpec(exclude=("a b",)), ["exclude", "whitespace"]),
    ],
)  # fmt: skip
def test_invalid_containers_raise_value_errors_naming_role_value_and_choices(make, fragments):
    with pytest.raises(ValueError) as info:
        make()
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


@pytest.mark.parametrize(
    "data, fragments",
    [
        ({"prefil": {}}, ["unknown key 'prefil'", "Did you mean 'prefill'?", "prefill, decode, kv, include, exclude"]),
        ({"prefill": {"weight": None}}, ["prefill", "unknown key 'weight'", "weights, activations"]),
        ({"kv": {"keys": None, "windo": 3}}, ["kv", "unknown key 'windo'", "keys, values, window"]),
        ({"kv": {"keys": {"format": "int", "bits": 4, "granularity": "token", "sorce": "dynamic"}}},
         ["kv.keys", "unknown key 'sorce'", "Did you mean 'source'?", "granularity, group_size"]),
        ({"prefill": {"weights": {"bits": 4}}}, ["prefill.weights", "missing key 'format'"]),
        ({"prefill": {"weights": {"format": "int"}}}, ["prefill.weights", "missing key 'bits'", "2..8"]),
        ({"prefill": {"weights": {"format": "fp9"}}}, ["prefill.weights", "'fp9'", "Did you mean 'fp8e4m3'?"]),
        ({"kv": {"keys": {"format": "int", "bits": 4}}}, ["kv.keys", "source"]),
        ({"decode": {"activations": {"format": "int", "bits": 4, "clip": "mse"}}}, ["decode.activations", "'mse'"]),
        ({"kv": {"window": 3}}, ["window", "3"]),
        ({"spec": "w8", "kv": None}, ["short form", "{'spec': '<string>'}"]),
        ({"spec": 8}, ["short form"]),
        ({"include": {"a": 1}}, ["include", "list"]),
        ({"include": ["a-b"]}, ["include", "'a-b'"]),
        (5, ["expected a mapping", "int"]),
        ({"spec": "w1"}, ["bits 1", "2..8"]),
    ],
)  # fmt: skip
def test_from_dict_is_strict(data, fragments):
    with pytest.raises(ValueError) as info:
        QuantSpec.from_dict(data)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_from_json_and_from_yaml_report_malformed_text_as_value_errors():
    with pytest.raises(ValueError, match="not valid JSON"):
        QuantSpec.from_json("{")
    with pytest.raises(ValueError, match="not valid YAML"):
        QuantSpec.from_yaml("a: [")
    with pytest.raises(ValueError, match="unknown key 'foo'"):
        QuantSpec.from_yaml(yaml.safe_dump({"foo": 1}))


# --- layering ------------------------------------------------------------------------------------
def test_importing_the_spec_loads_only_the_standard_library_and_pyyaml():
    code = (
        "import sys; before = set(sys.modules)\n"
        "import qdrift.spec\n"
        "from qdrift.spec import QuantSpec\n"
        "s = QuantSpec.parse('wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit')\n"
        "QuantSpec.from_yaml(s.to_yaml()); QuantSpec.from_json(s.to_json()); s.describe()\n"
        "print('\\n'.join(sorted(set(sys.modules) - before)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    out = out.stdout.split()
    # pyyaml's optional C extension is built with Cython, which registers its runtime modules.
    allowed = set(sys.stdlib_module_names) | {"yaml", "_yaml", "cython_runtime"}
    out = [m for m in out if not m.startswith("_cython_")]
    foreign = [
        # qdrift.quiet (stdlib logging filters) is imported by the package itself
        m for m in out if m.split(".")[0] not in allowed and m not in ("qdrift", "qdrift.quiet")
        and not m.startswith("qdrift.spec")
    ]
    assert not foreign, f"qdrift.spec pulled in {foreign}"
    assert "qdrift.spec" in out


def test_a_served_fingerprint_names_the_spec_and_other_servers_name_none():
    from qdrift import __version__
    from qdrift.spec.fingerprint import served_fingerprint, served_tag

    spec = "w4g128-a16-kv:16"
    assert served_fingerprint(spec) == f"qdrift-{__version__}-{QuantSpec.parse(spec).hash}"
    assert served_tag(served_fingerprint(spec)) == QuantSpec.parse(spec).hash
    assert served_tag(served_fingerprint(None)) == "baseline"
    assert served_tag(served_fingerprint("w16-a16-kv:16")) == "baseline"  # a no-op spec is the unquantized model
    for other in ("fp_44709d6fcb", "", None, "qdrift-baseline"):
        assert served_tag(other) is None


def test_nvfp4_dynamic_activations_are_described_with_their_per_token_global_scale():
    from qdrift.spec.describe import describe_scheme

    spec = QuantSpec.parse("wnvfp4-anvfp4-kv:16")
    assert "one FP32 scale per token" in describe_scheme(spec.prefill.activations, "activations")
    assert "one FP32 scale per tensor" in describe_scheme(spec.prefill.weights, "weights")
