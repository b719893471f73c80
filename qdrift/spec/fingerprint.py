"""The `system_fingerprint` a qdrift server answers with, and reading the spec back out of one.

One place for the format, so the server that writes it and the disclosure card that checks it
cannot drift apart: ``qdrift-<version>-<spec hash>``, or ``...-baseline`` when nothing is quantized.
"""

from __future__ import annotations

import re

_FINGERPRINT = re.compile(r"^qdrift-.+-(?P<tag>baseline|[0-9a-f]+)$")


def served_fingerprint(spec: str | None) -> str:
    """What a server serving `spec` (None, empty or a no-op spec such as w16-a16-kv:16: unquantized)
    says it served: every reader then takes "baseline" for unquantized, with no special case."""
    from qdrift import __version__
    from qdrift.spec.model import QuantSpec

    parsed = QuantSpec.parse(spec) if spec else None
    tag = parsed.hash if parsed is not None and not parsed.is_noop else "baseline"
    return f"qdrift-{__version__}-{tag}"


def served_tag(fingerprint: str) -> str | None:
    """The spec hash (or "baseline") in a qdrift server's fingerprint; None for any other server's."""
    m = _FINGERPRINT.match(fingerprint) if isinstance(fingerprint, str) else None
    return m["tag"] if m else None
