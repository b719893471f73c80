"""argparse types shared by the subcommands, so a bad number is a usage error, not a traceback."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer >= 1 (seeds, batches, threads, limits)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return int(text)
