"""Drop two import-time messages that are not the user's business, and nothing else.

torchao logs a warning for each optional compiled kernel (CUDA, mxfp8) that a CPU build cannot load,
and torch's pytree logs a deprecation note for every Enum torchao registers; every qdrift command
printed four such lines. Each filter matches its message exactly, so any other warning from those
loggers (and every warning elsewhere) still shows.
"""

from __future__ import annotations

import logging
import re

_NOISE = {
    "torchao": re.compile(r"Failed to load .*\.so: "),
    "torch.utils._pytree": re.compile(r"is an Enum subclass and is now natively supported by torch\.compile"),
}


class _DropNoise(logging.Filter):
    def __init__(self, pattern: re.Pattern):
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def install() -> None:
    """Add the filters (idempotent): loggers are created on first use, so this can run before the imports."""
    for name, pattern in _NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropNoise) for f in logger.filters):
            logger.addFilter(_DropNoise(pattern))
