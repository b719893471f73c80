"""`qdrift sweep run|status|cell|wandb-config FILE` and `qdrift compare --store PATH`.

The store defaults to `<sweep name>.sqlite` in the current directory; a rerun of the same file
skips the cells already done and retries the failed ones. `--wandb PROJECT` (or a `wandb:` block
in the file) logs each finished cell to W&B; `sweep cell` runs one cell, the way a `wandb agent`
run of the configuration from `sweep wandb-config` does. `--executor ray` runs the cells on Ray
workers (a local cluster, or `--ray-address`); the store is written by this process either way.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

from qdrift.cli_store import open_store
from qdrift.cli_types import positive_int
from qdrift.store import UNRECORDED_CODE


def _load(args):
    from qdrift.sweep import SweepError, load_sweep, resolve_sweep_file

    try:
        sweep = load_sweep(resolve_sweep_file(args.file))
    except (SweepError, FileNotFoundError) as e:
        raise SystemExit(f"qdrift: {e}") from None
    return sweep, Path(args.store) if args.store else output_dir() / f"{sweep.name}.sqlite"


DEFAULT_STORE = "default: qdrift-out/<sweep name>.sqlite, or $QDRIFT_OUT/<sweep name>.sqlite"


def output_dir() -> Path:
    """Where a sweep's store (and the report and plots beside it) go when --store is not given:
    $QDRIFT_OUT, else `qdrift-out/` under the current directory (ignored by the project's git), so
    that results do not clutter the folder a command runs in."""
    return Path(os.environ.get("QDRIFT_OUT") or "qdrift-out")


def _wandb_options(args, sweep):
    """--wandb flags over the file's wandb block; under `wandb agent` (WANDB_SWEEP_ID set) always on."""
    import os

    from qdrift.sweep.file import WandbOptions

    base = sweep.wandb
    if args.wandb is None and base is None:
        if not (getattr(args, "under_agent", False) and os.environ.get("WANDB_SWEEP_ID")):
            given = [f"--wandb-{n}" for n in ("entity", "mode", "dir") if getattr(args, f"wandb_{n}")]
            if given:
                raise SystemExit(f"qdrift: {', '.join(given)} given but W&B logging is off; add --wandb PROJECT "
                                 f"or a wandb block to the sweep file")
            return None
        base = WandbOptions(project=None)  # the agent sets WANDB_PROJECT / WANDB_ENTITY
    base = base or WandbOptions(project=args.wandb)
    return replace(base, project=args.wandb or base.project, entity=args.wandb_entity or base.entity,
                   mode=args.wandb_mode or base.mode, dir=args.wandb_dir or base.dir)


def _sink(args, sweep, store, path: Path):
    from qdrift.sweep.wandb_sink import sink_from

    try:
        return sink_from(_wandb_options(args, sweep), sweep.name, store, default_dir=path.parent)
    except (ImportError, ValueError) as e:
        raise SystemExit(f"qdrift: {e}") from None


def _report_sink(sink) -> None:
    if sink is not None and sink.runs:
        print(f"wandb: {sink.runs} run(s) logged ({sink.mode}), {sink.seconds / sink.runs:.2f} s per cell; "
              f"dir {sink.dir / 'wandb'}")


def cmd_sweep_run(args) -> int:
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
    with open_store(path) as store:
        sink = _sink(args, sweep, store, path)
        try:
            outcome = run_sweep(sweep, store, executor=chosen, progress=not args.quiet, on_result=sink,
                                allow_code_change=args.allow_code_change)
        except (ValueError, FileNotFoundError) as e:  # e.g. the model's files or qdrift's code changed
            raise SystemExit(f"qdrift sweep: {e}") from None
    print(outcome.summary())
    print(f"store: {path}")
    _report_sink(sink)
    if args.report:
        _print_report(path, sweep)
    # A failed sink (W&B) leaves every cell stored but some unlogged: not a clean run either.
    return 1 if outcome.failed or outcome.sink_error else 0


def cmd_sweep_cell(args) -> int:
    from qdrift.sweep import run_sweep
    from qdrift.sweep.execute import stored_result
    from qdrift.sweep.wandb_sweep import select_cell, single_cell_sweep

    sweep, path = _load(args)
    try:
        cell = select_cell(sweep, args.model, args.spec, args.task, args.horizon)
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    if args.threads:
        sweep = replace(sweep, threads=args.threads)
    with open_store(path) as store:
        sink = _sink(args, sweep, store, path)
        outcome = None
        if store.status(cell.key) == "done":
            print(f"{cell.label}: already done in {path} (cell {cell.key}); not run again")
        else:
            try:
                outcome = run_sweep(single_cell_sweep(sweep, cell), store, progress=not args.quiet, on_result=sink,
                                    allow_code_change=args.allow_code_change)
            except (ValueError, FileNotFoundError) as e:  # e.g. the model's files or qdrift's code changed
                raise SystemExit(f"qdrift sweep: {e}") from None
            print(f"{cell.label}: {'failed: ' + outcome.failed[0][1] if outcome.failed else 'done'} (cell {cell.key})")
        if sink is not None and (outcome is None or outcome.elsewhere):
            # Recorded before, or by another run while this one waited: an agent run still gets the
            # cell's numbers, its rows as the run gave them.
            with store.running():  # a pending log of it is taken, so that no other run logs it too
                took = store.take_pending_log(cell.key, sink.name)
                sink(stored_result(store, cell))
                if took:
                    store.settle_log(cell.key, sink.name, True)
    print(f"store: {path}")
    _report_sink(sink)
    return 1 if outcome is not None and (outcome.failed or outcome.sink_error) else 0


def cmd_sweep_wandb_config(args) -> int:
    import yaml

    from qdrift.sweep.wandb_sweep import wandb_sweep_config

    sweep, path = _load(args)
    config = wandb_sweep_config(sweep, _resolved(args.file), path)
    text = ("# W&B sweep configuration for qdrift sweep " + sweep.name + ": every agent run is one cell.\n"
            "#   wandb sweep THIS_FILE   then   wandb agent ENTITY/PROJECT/SWEEP_ID\n"
            + yaml.safe_dump(config, sort_keys=False))
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"W&B sweep configuration: {args.out} ({_grid_size(config)} runs, one per cell)")
    else:
        print(text, end="")
    return 0


def _resolved(ref: str) -> Path:
    from qdrift.sweep import resolve_sweep_file

    return resolve_sweep_file(ref)


def _grid_size(config: dict) -> int:
    n = 1
    for p in config["parameters"].values():
        n *= len(p["values"])
    return n


def _add_wandb_flags(p) -> None:
    p.add_argument("--wandb", metavar="PROJECT", help="log each finished cell to this W&B project "
                   "(overrides the file's wandb block)")
    p.add_argument("--wandb-entity", help="W&B entity (team or user)")
    p.add_argument("--wandb-mode", choices=["online", "offline"],
                   help="default: offline unless an API key is configured (WANDB_API_KEY or ~/.netrc)")
    p.add_argument("--wandb-dir", help="where the wandb/ run folders go (default: beside the store)")


def _add_code_change_flag(p) -> None:
    p.add_argument("--allow-code-change", action="store_true",
                   help="resume a store whose results other qdrift code measured (only for a change that cannot "
                        "alter results; the store then lists both codes)")


def cmd_sweep_status(args) -> int:
    from qdrift.sweep import unique_cells

    sweep, path = _load(args)
    cells = unique_cells(sweep)
    recorded, running, pids, interrupted = {}, set(), {}, set()
    if path.exists():
        with open_store(path) as store:
            recorded = {c["key"]: c for c in store.cells()}
            # Another run sharing the store is running these now; started and never recorded, those.
            running = {c.key for c in cells if store.peek(c.key) == "held"}
            pids = {k: store.holders([k]) for k in running}
            interrupted = store.interrupted()
    counts = {"done": 0, "failed": 0, "running": 0, "pending": 0}
    for cell in cells:
        rec = recorded.get(cell.key)
        status = "running" if cell.key in running else rec["status"] if rec else "pending"
        counts[status] += 1
        detail = ""
        if status == "running":
            detail = f"by the run of pid {', '.join(map(str, pids[cell.key]))}"
        elif rec and status == "done":
            detail = f"{rec['rows']} rows, {rec['wall_s']:.1f} s"
        elif cell.key in interrupted:
            detail = "interrupted: a run started it and never recorded it (killed, or crashed in it)"
        elif rec:
            detail = (rec["error"] or "").splitlines()[0] if rec["error"] else ""
        print(f"{status:>8}  {cell.key}  {cell.label}  {detail}".rstrip())
    now = f", {counts['running']} running" if counts["running"] else ""
    print(f"{sweep.name}: {len(cells)} cells, {counts['done']} done, {counts['failed']} failed{now}, "
          f"{counts['pending']} pending (store: {path})")
    codes = Counter(c["code"] or UNRECORDED_CODE for c in recorded.values() if c["status"] == "done")
    if codes:
        print(_code_line(codes))
    return 0


def _code_line(codes: Counter) -> str:
    """Which code measured the store's done cells, against the running one (`qdrift.code_fingerprint`):
    another one is why a run refuses to resume the store."""
    from qdrift.code_fingerprint import running_code

    current = running_code()

    def name(code: str) -> str:
        if code == current:
            return f"this qdrift's code (sha256 {code[:16]}...)"
        return "a qdrift that did not record its code" if code == UNRECORDED_CODE else f"sha256 {code[:16]}..."

    line = "code of the store's done cells: " + "; ".join(f"{n} by {name(c)}" for c, n in codes.most_common())
    return line if current in codes else line + f" (this qdrift's code is sha256 {current[:16]}...)"


def _print_report(path: Path, sweep) -> None:
    """The compare report of the sweep's cells, written beside the store and printed (what `--report`
    adds to a run)."""
    from qdrift.compare import build_report
    from qdrift.sweep import unique_cells

    with open_store(path) as store:
        out = build_report(store, out=Path(path).with_suffix(".md"), keys={c.key for c in unique_cells(sweep)})
    print()
    print(Path(out).read_text())
    print(f"report: {out} (plots beside it)")


def cmd_compare(args) -> int:
    from qdrift.compare import build_report

    path = Path(args.store)
    with open_store(path, existing=True) as store:
        try:
            out = build_report(store, baseline=args.baseline, out=args.out or path.with_suffix(".md"))
        except ValueError as e:  # e.g. a --baseline no done cell has
            raise SystemExit(f"qdrift: {e}") from None
    print(f"report: {out}")
    return 0


def add_parser(sub) -> None:
    s = sub.add_parser("sweep", help="run a YAML grid of models x specs x tasks into a results store")
    ssub = s.add_subparsers(dest="sweep_command", metavar="ACTION", required=True)
    run = ssub.add_parser("run", help="run every cell not already done (failed cells are retried)")
    run.add_argument("file", help="sweep YAML file, or 'default' for the shipped organism sweep")
    run.add_argument("--store", help=f"SQLite results store ({DEFAULT_STORE})")
    run.add_argument("--threads", type=positive_int, help="torch CPU threads (overrides the file's 'threads')")
    run.add_argument("--executor", choices=("local", "ray"),
                     help="run cells one by one in this process (local, the default) or on Ray workers "
                          "(overrides the file's 'executor')")
    run.add_argument("--ray-address", metavar="ADDR",
                     help="join a running Ray cluster ('auto', 'ray://host:10001'); default: start a local one")
    run.add_argument("--workers", type=positive_int, metavar="N",
                     help="Ray workers running cells at once (default: the file's 'workers', else one per CPU)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_code_change_flag(run)
    run.add_argument("--report", action="store_true",
                     help="then write the compare report beside the store and print it (as `qdrift compare`)")
    _add_wandb_flags(run)
    run.set_defaults(func=cmd_sweep_run)
    cell = ssub.add_parser("cell", help="run one cell of the sweep into the store (what a `wandb agent` run does)")
    cell.add_argument("file", help="sweep YAML file, or 'default'")
    cell.add_argument("--model", required=True, help="one of the file's models")
    cell.add_argument("--spec", required=True, help="one of the file's specs, or 'baseline'")
    cell.add_argument("--task", required=True, help="a task name (or #INDEX), or NAME@HORIZON")
    cell.add_argument("--horizon", type=int, help="the horizon, for agent tasks")
    cell.add_argument("--store", help=f"SQLite results store ({DEFAULT_STORE})")
    cell.add_argument("--threads", type=positive_int, help="torch CPU threads (overrides the file's 'threads')")
    cell.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_code_change_flag(cell)
    _add_wandb_flags(cell)
    cell.set_defaults(func=cmd_sweep_cell, under_agent=True)
    wc = ssub.add_parser("wandb-config", help="a W&B sweep configuration (grid) whose agent runs are the cells")
    wc.add_argument("file", help="sweep YAML file, or 'default'")
    wc.add_argument("--store", help=f"the store the agent runs commit to ({DEFAULT_STORE})")
    wc.add_argument("--out", help="write the YAML here (default: print it)")
    wc.set_defaults(func=cmd_sweep_wandb_config)
    st = ssub.add_parser("status", help="list the sweep's cells: done, failed (with the error) or pending")
    st.add_argument("file", help="sweep YAML file, or 'default'")
    st.add_argument("--store", help=f"SQLite results store ({DEFAULT_STORE})")
    st.set_defaults(func=cmd_sweep_status)
    c = sub.add_parser("compare", help="markdown report (+ PNG plots) of every variant vs the baseline in a store")
    c.add_argument("--store", required=True, help="SQLite results store written by `qdrift sweep run`")
    c.add_argument("--baseline", default=None,
                   help="the config the variants are compared with (default: baseline); one no cell has is refused")
    c.add_argument("--out", help="report path (default: the store path with .md); plots are saved beside it")
    c.set_defaults(func=cmd_compare)
