"""PointerChase: follow a hidden chain of keys through a lookup tool, then report where it ends.

The task gives a start key. `lookup(key)` returns the key's successor in a hidden table; the
correct next call is always `lookup` of the key just returned, and after L successful lookups
`answer(value)` with the last key returned. The oracle is conditional: a wrong key that exists in
the table (the table holds distractor keys too) moves the agent there and the chase continues
from it; a key that does not exist changes nothing. `success()` checks the answer against the
true end of the chain from the start key. Keys are `k<n>` with n below 1000 while
2 * (L + 1 + distractors) <= 1000 (below 10_000, 100_000, ... beyond that).

`digits` sets the length of what is copied each step: with `digits=D` every key has exactly D
digits (`k1048576` at D=7). Why a knob: a key is copied from the last tool result, and copying is
the one skill a small fine-tuned model does perfectly at three to five digits; the length of the
copy is the difficulty that moves its per-step accuracy (`qdrift calibrate`). At its default (0)
it is not part of the seed material, so every instance drawn before it existed is unchanged.
"""

from __future__ import annotations

from qdrift.envs.base import ToolCall
from qdrift.envs.schema import function_tool
from qdrift.envs.toolenv import Knob, ToolEnv


def _of_length(digits: int) -> range:
    """The numbers written with exactly `digits` digits."""
    return range(0 if digits == 1 else 10 ** (digits - 1), 10 ** digits)


class PointerChase(ToolEnv):
    name = "pointer_chase"
    knobs = {
        "distractors": Knob(20, 0, 10_000, "extra table keys off the chain"),
        "digits": Knob(0, 0, 18, "0: keys below 1000 (longer only as the table needs); D: every key has D digits",
                       seeds_at_default=False),
    }

    def check_settings(self):
        digits, keys = self.knob("digits"), self.horizon + 1 + self.knob("distractors")
        if digits and len(_of_length(digits)) < 2 * keys:
            fewest = next(n for n in range(1, 19) if len(_of_length(n)) >= 2 * keys)
            raise ValueError(f"pointer_chase: digits={digits} leaves too few keys for L + 1 + distractors = {keys} "
                             f"(at most half the {len(_of_length(digits))} keys of that length are used); "
                             f"valid: 0 or digits >= {fewest}")

    def build(self, rng):
        L, d, digits = self.horizon, self.knob("distractors"), self.knob("digits")
        if digits:
            numbers = _of_length(digits)
        else:
            space = 1000
            while space < 2 * (L + 1 + d):
                space *= 10
            numbers = range(space)
        used: set[int] = set()

        def fresh() -> str:
            while True:
                n = rng.randrange(numbers.start, numbers.stop)  # randrange(stop) draws the same
                if n not in used:
                    used.add(n)
                    return f"k{n}"

        self.chain = [fresh() for _ in range(L + 1)]  # drawn first: a shorter task is a prefix of a longer one
        extra = [fresh() for _ in range(d)]
        pool = self.chain + extra
        self.table = {a: b for a, b in zip(self.chain[:-1], self.chain[1:], strict=True)}
        for key in [self.chain[-1], *extra]:
            self.table[key] = rng.choice(pool)

    def make_tools(self):
        return [
            function_tool("lookup", "Return the key that follows `key` in the table.",
                          {"key": {"type": "string", "description": "a key such as k17"}}),
            function_tool("answer", "Give the final key and end the task.",
                          {"value": {"type": "string", "description": "the last key returned"}}),
        ]

    def task(self):
        L = self.horizon
        return (f"Start key: {self.chain[0]}. Call lookup(key) on it; the result is the next key. "
                f"Look up each returned key in turn, {L} lookup{'s' if L > 1 else ''} in all, "
                "then call answer(value) with the last key returned.")

    def init_state(self):
        self.current = self.chain[0]
        self.hops = 0
        self.answered: str | None = None

    def expected(self):
        if self.hops < self.horizon:
            return ToolCall("lookup", {"key": self.current})
        return ToolCall("answer", {"value": self.current})

    def error_suffix(self):
        return f"; {self.progress(self.hops)}"

    def apply(self, call):
        if call.name == "answer":
            self.answered = call.arguments["value"]
            return "done", True
        key = call.arguments["key"]
        if key not in self.table:
            return f"{key[:20]} not found; {self.progress(self.hops)}", False
        self.hops += 1
        self.current = self.table[key]
        return f"{self.current}; {self.progress(self.hops)}", False

    def success(self):
        return self.answered == self.chain[-1]
