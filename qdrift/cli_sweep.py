"""`qdrift sweep run|status FILE` and `qdrift compare --store PATH`: sweeps into a results store, and the report.

The store defaults to `<sweep name>.sqlite` in the current directory; a rerun of the same file
skips the cells already done and retries the failed ones.
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

    sweep, path = _load(args)
    if args.threads:
        sweep = replace(sweep, threads=args.threads)
    with Store(path) as store:
        outcome = run_sweep(sweep, store, progress=not args.quiet)
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


def add_parser(sub) -> None:
    s = sub.add_parser("sweep", help="run a YAML grid of models x specs x tasks into a results store")
    ssub = s.add_subparsers(dest="sweep_command", metavar="ACTION", required=True)
    run = ssub.add_parser("run", help="run every cell not already done (failed cells are retried)")
    run.add_argument("file", help="sweep YAML file, or 'default' for the shipped organism sweep")
    run.add_argument("--store", help="SQLite results store (default: <sweep name>.sqlite)")
    run.add_argument("--threads", type=int, help="torch CPU threads (overrides the file's 'threads')")
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
