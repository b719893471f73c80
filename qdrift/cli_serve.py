"""`qdrift serve`: serve a local model under a spec over the OpenAI chat-completions API.

Binds to 127.0.0.1 unless --host says otherwise; any other address is reachable from other
machines; without --api-key-env the server has no authentication, so binding there prints a warning.
"""

from __future__ import annotations

import sys
import time


def cmd_serve(args) -> int:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"qdrift: serving needs fastapi and uvicorn ({e}); pip install 'qdrift[serve]'") from None
    import torch

    from qdrift.models.refs import check_model_ref
    from qdrift.serve import ServerThread, is_loopback, load_served
    from qdrift.spec import QuantSpec

    problem = check_model_ref(args.model)
    if problem:
        raise SystemExit(f"qdrift: {problem}")
    if args.spec != "baseline":
        try:
            QuantSpec.parse(args.spec)
        except ValueError as e:
            raise SystemExit(f"qdrift: bad --spec {args.spec!r}: {e} ('baseline' serves the unquantized model)") from None
    if args.max_tokens < 1 or args.max_tokens_limit < 1:
        raise SystemExit(f"qdrift: --max-tokens and --max-tokens-limit must be >= 1, got {args.max_tokens} and "
                         f"{args.max_tokens_limit}")
    api_key = None
    if args.api_key_env:
        from qdrift.backends.credentials import load_api_key

        try:
            api_key = load_api_key(args.api_key_env, required=True)
        except ValueError as e:
            raise SystemExit(f"qdrift: --api-key-env: {e}") from None
    if not is_loopback(args.host) and api_key is None:
        print(f"qdrift serve: WARNING: binding to {args.host}, not loopback, without --api-key-env: anyone who "
              "can reach this machine can use the server", file=sys.stderr, flush=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    try:
        served = load_served(args.model, args.spec, dtype=dtype, name=args.name, tool_mode=args.tool_mode,
                             tool_format=args.tool_format, prefill_opening=args.prefill_opening,
                             default_max_tokens=args.max_tokens, max_tokens_limit=args.max_tokens_limit)
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    server = ServerThread(served, host=args.host, port=args.port, log_level=args.log_level, api_key=api_key)
    try:
        server.start()
    except (RuntimeError, TimeoutError) as e:
        raise SystemExit(f"qdrift: could not serve on {args.host}:{args.port}: {e}") from None
    print(f"qdrift serve: {served.name} under {served.spec or 'baseline'} ({served.prompt.describe()}; "
          f"system_fingerprint {served.fingerprint}) at {server.url}", flush=True)
    try:
        while server.thread.is_alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def add_parser(sub) -> None:
    s = sub.add_parser("serve", help="serve a model under a spec over the OpenAI chat-completions API")
    s.add_argument("model", help="'organism', 'smollm2', 'tiny:<arch>' or a local model directory")
    s.add_argument("--spec", required=True, help="quantization spec (e.g. w4g128-a16-kv:16), or 'baseline'")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    s.add_argument("--port", type=int, default=8000, help="port (0: any free port)")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    s.add_argument("--name", help="model name clients send and see (default: the model reference)")
    s.add_argument("--max-tokens", type=int, default=512, help="completion budget when a request sets none")
    s.add_argument("--max-tokens-limit", type=int, default=4096,
                   help="the most max_tokens a request may ask for (larger is a 400; default 4096)")
    s.add_argument("--api-key-env", metavar="NAME",
                   help="require 'Authorization: Bearer <key>' with the key read from environment variable NAME")
    s.add_argument("--tool-mode", default="auto", choices=["auto", "native", "prompted"],
                   help="native: the chat template renders tools; prompted: qdrift describes them in the system turn")
    s.add_argument("--tool-format", help="tool-call format: hermes, llama3_json or mistral (default: from the template)")
    s.add_argument("--prefill-opening", action="store_true",
                   help="start every assistant turn of a request with tools with the call opening")
    s.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    s.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    s.set_defaults(func=cmd_serve)
