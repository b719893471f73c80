"""Bounds on the few BFCL backend calls whose cost the call's own arguments set without limit.

BFCL's backends compute whatever they are asked: `MathAPI.power(10, 10**12)` builds an integer of a
trillion digits, and `logarithm` / `square_root` take their working precision (digits) from the
call. In BFCL's own harness such a call never returns; here it would stall a whole sweep on one
generated number. These calls are an execution error instead, named with the bound. The bounds sit
where the computation still takes well under a second on one CPU core (10**(10**6) about 0.15 s,
a 10,000-digit mpmath logarithm about 0.1 s), so every call that finished before is untouched.
Written by hand because BFCL has no such limits to reuse.
"""

from __future__ import annotations

import math
from typing import Any

MAX_RESULT_DIGITS = 1_000_000  # an integer power's result, in decimal digits
MAX_PRECISION_DIGITS = 10_000  # logarithm's and square_root's working precision


def _integer(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def power_digits(base: Any, exponent: Any) -> float:
    """About how many decimal digits `base ** exponent` has when both are integers (0 when it is
    small or not an integer power: float powers overflow at once, negative exponents give floats)."""
    if not (_integer(base) and _integer(exponent)) or exponent <= 0 or abs(base) <= 1:
        return 0.0
    return exponent * math.log10(abs(base))


def unbounded_cost(method, arguments: dict[str, Any]) -> str | None:
    """Why calling `method` (a bound BFCL backend method) with `arguments` would not finish, or None."""
    owner = type(getattr(method, "__self__", None)).__name__
    name = getattr(method, "__name__", "")
    if owner != "MathAPI":
        return None
    if name == "power":
        digits = power_digits(arguments.get("base"), arguments.get("exponent"))
        if digits > MAX_RESULT_DIGITS:
            return (f"power(base={arguments['base']}, exponent={arguments['exponent']}) would have about "
                    f"{digits:.3g} digits; integer powers are computed up to {MAX_RESULT_DIGITS:,} digits")
    if name in ("logarithm", "square_root"):
        precision = arguments.get("precision")
        if _integer(precision) and precision > MAX_PRECISION_DIGITS:
            return (f"{name}: precision {precision} is above the {MAX_PRECISION_DIGITS:,} digits "
                    f"computed here")
    return None
