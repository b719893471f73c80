from qdrift.report.precision import precision_of


def test_phase_split_spec_gives_the_per_phase_line():
    p = precision_of("wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit")
    assert p["summary"] == ("KV cache: FP8-e4m3 (unit scales); weights: INT4 g128 (decode), FP8-e4m3 (prefill); "
                            "activations: unquantized (decode), FP8-e4m3 (prefill)")
    assert p["prefill"] == {"weights": "FP8-e4m3", "activations": "FP8-e4m3"}
    assert p["decode"] == {"weights": "INT4 g128", "activations": "unquantized"}
    assert any(d.startswith("phases: prefill") for d in p["details"])


def test_kivi_spec_names_keys_values_and_the_full_precision_window():
    p = precision_of("w16-a16-k:2c32z@dyn-v:2g32z@dyn-win128")
    assert p["kv_cache"] == {"keys": "INT2 c32 zero-point (dynamic scales)",
                             "values": "INT2 g32 zero-point (dynamic scales)", "full_precision_window": 128}
    assert p["summary"].startswith("KV cache: keys INT2 c32 zero-point (dynamic scales), values INT2 g32 "
                                   "zero-point (dynamic scales), the 128 most recent tokens unquantized; weights: "
                                   "unquantized;")
