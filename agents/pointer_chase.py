"""PointerChase: follow a hidden chain of keys through a lookup tool, then report where it ends.

The task gives a start key. `lookup(key)` returns the key's successor in a hidden table; the
correct next call is always `lookup` of the key just returned, and after L successful lookups
`answer(value)` with the last key returned. The oracle is conditional: a wrong key that exists in
the table (the table holds distractor keys too) moves the agent there and the chase continues
from it; a key that does not exist changes nothing. `success()` checks the answer against the
true end of the chain from the start key. Keys are `k<n>` with n below 1000 while
2 * (L + 1 + distractors) <= 1000 (below 10_000, 100_000, ... beyond that).
"""

from __future__ import annotations

from qdrift.envs.base import ToolCall
from qdrift.envs.schema import function_tool
from qdrift.envs.toolenv import Knob, ToolEnv


class PointerChase(ToolEnv):
    name = "pointer_chase"
    knobs = {"distractors": Knob(20, 0, 10_000, "extra table keys off the chain")}

    def build(self, rng):
        L, d = self.horizon, self.knob("distractors")
        space = 1000
        while space < 2 * (L + 1 + d):
            space *= 10
        used: set[int] = set()

        def fresh() -> str:
            while True:
                n = rng.randrange(space)
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
