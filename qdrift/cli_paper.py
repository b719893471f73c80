"""`qdrift paper [DIR]`: run the paper's sweeps (resuming from their stores) and rebuild it.

    qdrift paper paper/               # what `make -C paper` runs
    qdrift paper paper/ --no-run      # only regenerate from what the stores hold
"""

from __future__ import annotations


def cmd_paper(args) -> int:
    from qdrift.paper import build_paper
    from qdrift.sweep import SweepError

    try:
        build_paper(args.dir, run=not args.no_run, progress=not args.quiet,
                    allow_code_change=args.allow_code_change)
    except (FileNotFoundError, ValueError, SweepError) as e:
        raise SystemExit(f"qdrift paper: {e}") from None
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("paper", help="run the paper's sweeps (resuming) and regenerate its tables, figures "
                                     "and document")
    p.add_argument("dir", nargs="?", default="paper", help="the paper directory (holds paper.yaml); default: paper")
    p.add_argument("--no-run", action="store_true", help="do not run missing cells; build from the stores as they are")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--allow-code-change", action="store_true",
                   help="resume stores whose results other qdrift code measured (only for a change that cannot "
                        "alter results; each store then lists both codes)")
    p.set_defaults(func=cmd_paper)
