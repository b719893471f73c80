"""`qdrift verify`: make a tool-call request file from agent environments, and verify endpoints with it.

    qdrift verify make-requests --env pointer_chase --horizons 1 4 16 --seeds 20 --out requests.jsonl
    qdrift verify run --requests requests.jsonl --reference ref=http://localhost:8000/v1 \
        --endpoint fp8=http://localhost:8001/v1 --model M --reference-repeats 3 --margin 0.02 --out verify/
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys


def _named_url(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name or not url:
        raise argparse.ArgumentTypeError(f"expected NAME=URL (e.g. ref=http://localhost:8000/v1), got {text!r}")
    return name, url


def _named_source(text: str) -> tuple[str, str]:
    name, sep, source = text.partition("=")
    if not sep or not name or not source:
        raise argparse.ArgumentTypeError(f"expected NAME=SOURCE (an endpoint's name, then an environment variable "
                                         f"or a file), got {text!r}")
    return name, source


def make_endpoint(name: str, url: str, model: str, args):
    """An HTTP endpoint for `url` (imported here: the client is needed only to reach an endpoint).

    Each endpoint sends only the key named for it (--api-key-env / --api-key-file NAME=...), and none
    otherwise: one provider's key must never reach another's server.
    """
    from qdrift.backends.openai_client import OpenAIEndpoint

    env = dict(getattr(args, "api_key_env", None) or []).get(name)
    file = dict(getattr(args, "api_key_file", None) or []).get(name)
    return OpenAIEndpoint(base_url=url, model=model, name=name, timeout_s=args.timeout, api_key_env=env,
                          config_file=file, require_api_key=bool(env or file))


def cmd_make_requests(args) -> int:
    from qdrift.verify.generate import make_requests
    from qdrift.verify.requests import write_requests

    try:
        reqs = make_requests(args.env, args.horizons, args.seeds, steps=args.steps)
    except ValueError as e:
        raise SystemExit(f"qdrift verify make-requests: {e}") from None
    if args.temperature is not None:
        if args.temperature < 0:
            raise SystemExit(f"qdrift verify make-requests: --temperature must be >= 0, got {args.temperature}")
        for r in reqs:
            r.body["temperature"] = args.temperature
    path = write_requests(args.out, reqs)
    kinds: dict[str, int] = {}
    for r in reqs:
        kinds[r.meta["kind"]] = kinds.get(r.meta["kind"], 0) + 1
    print(f"wrote {len(reqs)} requests to {path} ({', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))})")
    return 0


def cmd_run(args) -> int:
    import qdrift
    from qdrift.verify.report import render_text, write_report
    from qdrift.verify.requests import file_sha256, read_requests
    from qdrift.verify.run import analyse, verify_endpoints

    try:
        reqs = read_requests(args.requests)
        overrides = json.loads(args.extra_body) if args.extra_body else {}
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"qdrift verify run: {e}") from None
    if not isinstance(overrides, dict):
        raise SystemExit(f"qdrift verify run: --extra-body must be a JSON object of request fields "
                         f"(e.g. '{{\"top_p\": 1}}'), got a JSON {type(overrides).__name__}")
    for key, value in (("temperature", args.temperature), ("max_tokens", args.max_tokens)):
        if value is not None:
            overrides[key] = value
    names = [args.reference[0]] + [n for n, _ in args.endpoint]
    if len(set(names)) != len(names):
        raise SystemExit(f"qdrift verify run: endpoint names must be unique, got {names}")
    for flag, pairs in (("--api-key-env", args.api_key_env), ("--api-key-file", args.api_key_file)):
        unknown = sorted({n for n, _ in pairs} - set(names))
        if unknown:
            raise SystemExit(f"qdrift verify run: {flag} names {', '.join(unknown)}, which is not an endpoint here "
                             f"(endpoints: {', '.join(names)})")
    try:
        ref = (args.reference[0], make_endpoint(*args.reference, args.model, args))
        eps = {n: make_endpoint(n, u, args.model, args) for n, u in args.endpoint}
    except ValueError as e:
        raise SystemExit(f"qdrift verify run: {e}") from None
    problems = [p for e in (ref[1], *eps.values()) if hasattr(e, "preflight") for p in [e.preflight()] if p]
    if problems:
        raise SystemExit("qdrift verify run: " + "; ".join(problems))
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    try:
        run = verify_endpoints(reqs, ref, eps, args.out, repeats=args.reference_repeats, model=args.model,
                               overrides=overrides, concurrency=args.concurrency,
                               allow_mixed_fingerprints=args.allow_mixed_fingerprints, progress=True)
        analysis = analyse(run, margin=args.margin, alpha=args.alpha, n_boot=args.n_boot, seed=args.seed)
    except ValueError as e:
        raise SystemExit(f"qdrift verify run: {e}") from None
    meta = {"requests_file": str(args.requests), "requests_sha256": file_sha256(args.requests),
            "model": args.model, "reference_url": args.reference[1],
            "endpoint_urls": dict(args.endpoint), "overrides": overrides, "started": started,
            "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "qdrift_version": qdrift.__version__}
    paths = write_report(analysis, args.out, meta)
    print(render_text(analysis))
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return _failures(analysis.summaries)


def _failures(summaries: dict[str, dict]) -> int:
    """1 when any request failed after its retries (like `qdrift replay`): the report is over fewer
    answers than asked for, so the run is not a clean one; 0 otherwise."""
    failed = {name: s for name, s in summaries.items() if s["failure_count"]}
    if not failed:
        return 0
    total = sum(s["failure_count"] for s in failed.values())
    each = "; ".join(f"{name}: {s['failure_count']} of {s['requests']} ("
                     + ", ".join(f"{reason or 'unknown'} {n}" for reason, n in sorted(s["failure_reasons"].items(),
                                                                                     key=lambda kv: str(kv[0])))
                     + ")" for name, s in failed.items())
    print(f"qdrift verify run: {total} request(s) failed after their retries ({each}); they are kept in the "
          "journals as failures and left out of the paired comparison. Run the same command again to resend "
          "only those", file=sys.stderr)
    return 1


def add_parser(sub) -> None:
    v = sub.add_parser("verify", help="verify endpoints' tool calling against a reference (K2 Vendor Verifier style)")
    vsub = v.add_subparsers(dest="verify_command", metavar="SUBCOMMAND", required=True)
    m = vsub.add_parser("make-requests", help="write a JSONL request file from agent environments' oracle paths")
    m.add_argument("--env", nargs="+", required=True,
                   help="environment names or path.py@Class, knobs after a colon: ledger:echo=1")
    m.add_argument("--horizons", nargs="+", type=int, required=True)
    m.add_argument("--seeds", type=int, default=10, help="number of held-out seeds per (env, horizon)")
    m.add_argument("--steps", choices=["sample", "all"], default="sample",
                   help="sample: first, middle, last, final-answer and after-final steps; all: every step")
    m.add_argument("--temperature", type=float, default=None,
                   help="write this temperature into every request (0: greedy); without it an OpenAI-compatible "
                        "server samples at its default, 1.0, and the reference's noise floor is sampling noise")
    m.add_argument("--out", required=True, help="the JSONL file to write")
    m.set_defaults(func=cmd_make_requests)
    r = vsub.add_parser("run", help="replay a request file against a reference and endpoints; report")
    r.add_argument("--requests", required=True, help="JSONL of chat-completion request bodies with tools")
    r.add_argument("--reference", required=True, type=_named_url, help="NAME=URL of the reference endpoint")
    r.add_argument("--endpoint", action="append", type=_named_url, default=[],
                   help="NAME=URL of an endpoint to verify (repeatable)")
    r.add_argument("--model", required=True, help="the served model name put in every request")
    r.add_argument("--reference-repeats", type=int, default=3, help="reference replays for the noise floor")
    r.add_argument("--margin", type=float, default=None, help="equivalence margin (e.g. 0.02) for TOST")
    r.add_argument("--alpha", type=float, default=0.05)
    r.add_argument("--n-boot", type=int, default=2000)
    r.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    r.add_argument("--temperature", type=float, default=None, help="override every request's temperature")
    r.add_argument("--max-tokens", type=int, default=None, help="override every request's max_tokens")
    r.add_argument("--extra-body", default=None, help="JSON object merged into every request body")
    r.add_argument("--api-key-env", action="append", type=_named_source, default=[], metavar="NAME=VAR",
                   help="the environment variable holding endpoint NAME's API key (repeatable); an endpoint "
                        "without one is sent no key")
    r.add_argument("--api-key-file", action="append", type=_named_source, default=[], metavar="NAME=FILE",
                   help="a JSON file {\"api_key\": \"...\"} holding endpoint NAME's key (repeatable)")
    r.add_argument("--allow-mixed-fingerprints", action="store_true",
                   help="analyse an endpoint whose answers carry several system_fingerprints (by default refused: "
                        "the server was redeployed between runs, or serves several builds)")
    r.add_argument("--concurrency", type=int, default=4)
    r.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds")
    r.add_argument("--out", required=True, help="output directory (journals, report.md/json/png)")
    r.set_defaults(func=cmd_run)
