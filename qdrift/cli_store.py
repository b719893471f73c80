"""Opening the results store a command names with --store, its problems as one-line errors."""

from __future__ import annotations

from pathlib import Path


def open_store(path, existing: bool = False):
    """The store at `path`, or the reason it cannot be opened as a clean error (not a traceback); every
    command taking --store opens it here, so each names a bad store alike. `existing`: a missing file is
    refused, not created, for commands that only read (an empty store reports nothing)."""
    from qdrift.store import Store

    if existing and not Path(path).exists():
        raise SystemExit(f"qdrift: no results store at {path} (run `qdrift sweep run FILE --store {path}` first)")
    try:
        store = Store(path)
        store.check_integrity()
        return store
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
