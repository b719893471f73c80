"""`qdrift sweep run|status FILE` and `qdrift compare --store PATH`: sweeps into a results store, and the report.

The store defaults to `<sweep name>.sqlite` in the current directory; a rerun of the same file
skips the cells already done and retries the failed ones. `--executor ray` runs the cells on Ray
workers (a local cluster, or `--ray-address`); the store is written by this process either way.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path


def _load(args):
    from qdrift.sweep import SweepError, load_sweep, resolve_sweep_file

    try:
        sweep = load_sweep(resolve_sweep_file(args.file))
    except (SweepError, FileNotFoundError) as e:
        raise SystemExit(f"qdrift: {e}") from None
    return sweep, Path(args.store or f"{sweep.name}.sqlite")


def cmd_sweep_run(args) -> int:
    from qdrift.store import Store
    from qdrift.sweep import run_sweep
    from qdrift.sweep.execute import executor_for

    sweep, path = _load(args)
    if args.threads:
        sweep = replace(sweep, threads=args.threads)
    executor = args.executor or ("ray" if args.ray_address or args.workers else sweep.executor)
    if executor == "local" and (args.ray_address or args.workers):
        raise SystemExit("qdrift: --ray-address and --workers need the ray executor (--executor ray); "
                         "the local executor runs one cell at a time in this process")
    sweep = replace(sweep, executor=executor, workers=args.workers or sweep.workers)
    try:
        chosen = executor_for(sweep, address=args.ray_address)
    except ImportError as e:
        raise SystemExit(f"qdrift: {e}") from None
    with Store(path) as store:
        outcome = run_sweep(sweep, store, executor=chosen, progress=not args.quiet)
    print(outcome.summary())
    print(f"store: {path}")
    return 1 if outcome.failed else 0


def cmd_sweep_status(args) -> int:
    from qdrift.store import Store
    from qdrift.sweep import unique_cells

    sweep, path = _load(args)
    cells = unique_cells(sweep)
    recorded = {}
    if path.exists():
        with Store(path) as store:
            recorded = {c["key"]: c for c in store.cells()}
    counts = {"done": 0, "failed": 0, "pending": 0}
    for cell in cells:
        rec = recorded.get(cell.key)
        status = rec["status"] if rec else "pending"
        counts[status] += 1
        detail = ""
        if rec and status == "done":
            detail = f"{rec['rows']} rows, {rec['wall_s']:.1f} s"
        elif rec:
            detail = (rec["error"] or "").splitlines()[0] if rec["error"] else ""
        print(f"{status:>8}  {cell.key}  {cell.label}  {detail}".rstrip())
    print(f"{sweep.name}: {len(cells)} cells, {counts['done']} done, {counts['failed']} failed, "
          f"{counts['pending']} pending (store: {path})")
    return 0


def cmd_compare(args) -> int:
    from qdrift.compare import build_report
    from qdrift.store import Store

    path = Path(args.store)
    if not path.is_file():
        raise SystemExit(f"qdrift: no results store at {path} (run `qdrift sweep run FILE --store {path}` first)")
    with Store(path) as store:
        out = build_report(store, baseline=args.baseline, out=args.out or path.with_suffix(".md"))
    print(f"report: {out}")
    return 0


def _positive(text: str) -> int:
    import argparse

    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return int(text)


def add_parser(sub) -> None:
    s = sub.add_parser("sweep", help="run a YAML grid of models x specs x tasks into a results store")
    ssub = s.add_subparsers(dest="sweep_command", metavar="ACTION", required=True)
    run = ssub.add_parser("run", help="run every cell not already done (failed cells are retried)")
    run.add_argument("file", help="sweep YAML file, or 'default' for the shipped organism sweep")
    run.add_argument("--store", help="SQLite results store (default: <sweep name>.sqlite)")
    run.add_argument("--threads", type=int, help="torch CPU threads (overrides the file's 'threads')")
    run.add_argument("--executor", choices=("local", "ray"),
                     help="run cells one by one in this process (local, the default) or on Ray workers "
                          "(overrides the file's 'executor')")
    run.add_argument("--ray-address", metavar="ADDR",
                     help="join a running Ray cluster ('auto', 'ray://host:10001'); default: start a local one")
    run.add_argument("--workers", type=_positive, metavar="N",
                     help="Ray workers running cells at once (default: the file's 'workers', else one per CPU)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=cmd_sweep_run)
    st = ssub.add_parser("status", help="list the sweep's cells: done, failed (with the error) or pending")
    st.add_argument("file", help="sweep YAML file, or 'default'")
    st.add_argument("--store", help="SQLite results store (default: <sweep name>.sqlite)")
    st.set_defaults(func=cmd_sweep_status)
    c = sub.add_parser("compare", help="markdown report (+ PNG plots) of every variant vs the baseline in a store")
    c.add_argument("--store", required=True, help="SQLite results store written by `qdrift sweep run`")
    c.add_argument("--baseline", default="baseline", help="the config the variants are compared with")
    c.add_argument("--out", help="report path (default: the store path with .md); plots are saved beside it")
    c.set_defaults(func=cmd_compare)
