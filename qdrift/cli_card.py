"""`qdrift card`: write the disclosure card (card.json + card.md) of a served configuration.

    qdrift card --spec 'wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit' --served-model my-model \
        --verify verify/ --store sweep.sqlite --baseline baseline --out card/
"""

from __future__ import annotations


def _check_store_model(served_model: str, model: str | None, named: bool) -> str | None:
    """A card carries the served model's results only. The store names a model by its reference
    ('organism', a folder), which a server may serve under another name (`qdrift serve --name`):
    that mapping is taken only when said (--store-model), and the card then states it."""
    if model is None or model == served_model:
        return None
    if not named:
        raise ValueError(f"the store's results are of model {model!r}, not --served-model {served_model!r}; give "
                         f"--served-model {model!r}, or, if the server serves {model!r} as {served_model!r} "
                         f"(qdrift serve --name), say so with --store-model {model!r}")
    return (f"the store's results are of model {model!r}, which the card's served model {served_model!r} serves "
            f"under another name (said with --store-model {model!r})")


def cmd_card(args) -> int:
    from qdrift.report.card import CardError, build_card, write_card
    from qdrift.report.evidence import (
        long_horizon_from_store,
        short_form_from_store,
        store_model,
        tool_calls_from_verify,
    )
    from qdrift.spec import QuantSpec
    from qdrift.sweep.file import BASELINE
    from qdrift.verify.requests import file_sha256

    try:  # "baseline", as serve, sweeps and the agents command take it: nothing quantized
        spec = QuantSpec() if args.spec == BASELINE else QuantSpec.parse(args.spec)
    except ValueError as e:
        raise SystemExit(f"qdrift card: bad --spec: {e}") from None
    # The name the store's cells carry: sweeps call the no-op spec "baseline", any other by its canonical string
    config = BASELINE if args.spec == BASELINE else str(spec)
    tool_calls, data, short_form, long_horizon, notes = None, [], [], [], []
    try:
        if args.verify:
            tool_calls, data = tool_calls_from_verify(args.verify, args.verify_endpoint)
        if args.store:  # opened as the sweep commands open it: a missing one is refused, not carded as empty
            from qdrift.cli_store import open_store
            from qdrift.store import UNRECORDED_CODE

            with open_store(args.store, existing=True) as store:
                model = store_model(store, args.store_model)
                mapped = _check_store_model(args.served_model, model, args.store_model is not None)
                short_form = short_form_from_store(store, args.baseline, config, model)
                long_horizon = long_horizon_from_store(store, args.baseline, config, model)
                weights = store.model_fingerprints()
                codes = store.code_fingerprints()
            notes += [mapped] if mapped else []
            data.append({"role": "results store", "path": str(args.store), "sha256": file_sha256(args.store)})
            data += [{"role": "model weights the store's sweeps ran (sha256 over the model's files, "
                              "qdrift.models.fingerprint)", "path": ref, "sha256": fp}
                     for ref, fp in sorted(weights.items()) if ref == model]
            data += [{"role": "qdrift code that measured the store's results (sha256 over its sources, built-in "
                              "environments and task files, qdrift.code_fingerprint)", "path": "qdrift", "sha256": fp}
                     for fp in codes if fp != UNRECORDED_CODE]
            if UNRECORDED_CODE in codes:  # a data entry names a sha256: code no one recorded is said in words
                notes.append("some of the store's results were measured by a qdrift from before cells recorded "
                             "the code that measured them: that code is not known")
        card = build_card(spec, args.served_model, tool_calls, short_form, long_horizon, data, notes)
    except (ValueError, FileNotFoundError, CardError) as e:
        raise SystemExit(f"qdrift card: {e}") from None
    js, md = write_card(card, args.out)
    print(card["precision"]["summary"])
    print(f"wrote {js} and {md}")
    return 0


def add_parser(sub) -> None:
    c = sub.add_parser("card", help="write the disclosure card (JSON + markdown) of a served configuration")
    c.add_argument("--spec", required=True, help="the served configuration's spec string")
    c.add_argument("--served-model", required=True, help="the served model's name")
    c.add_argument("--verify", help="a `qdrift verify run` output directory (report.json)")
    c.add_argument("--verify-endpoint", help="which endpoint of that run this card describes (if several)")
    c.add_argument("--store", help="a sweep results store with the spec and the baseline")
    c.add_argument("--baseline", default="baseline", help="the baseline config name in the store")
    c.add_argument("--store-model", help="the model in the store whose results the card carries: needed when the "
                   "store holds several, or when the server serves it under another name (--served-model)")
    c.add_argument("--out", required=True, help="output directory for card.json and card.md")
    c.set_defaults(func=cmd_card)
