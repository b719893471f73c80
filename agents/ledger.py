"""Ledger: apply L numbered transactions to a balance, one per call, then report the balance.

The task lists L signed integers. The correct call at step i is `apply(amount_i)` (the tool
returns `bal <new balance>; next <i + 1>`, or `; all L done` after the last), then `finish(balance)` with the balance the agent's own
applications produced (conditional oracle: a wrong amount is applied and the next steps are judged
from there). `success()` requires `finish` with the true final balance.
"""

from __future__ import annotations

from qdrift.envs.base import ToolCall
from qdrift.envs.schema import function_tool
from qdrift.envs.toolenv import Knob, ToolEnv


class Ledger(ToolEnv):
    name = "ledger"
    knobs = {
        "amax": Knob(99, 1, 1_000_000, "amounts are nonzero integers in -amax..amax"),
        "echo": Knob(0, 0, 1, "1: each tool result repeats the next listed item (copy, not indexing)"),
    }

    def build(self, rng):
        a = self.knob("amax")
        self.start = rng.randint(0, a)
        self.amounts = []
        for _ in range(self.horizon):
            n = rng.randint(1, a)
            self.amounts.append(n if rng.random() < 0.5 else -n)
        self.final = self.start + sum(self.amounts)

    def make_tools(self):
        return [
            function_tool("apply", "Apply one transaction; returns the new balance.", {"amount": {"type": "integer"}}),
            function_tool("finish", "Report the final balance and end the task.", {"balance": {"type": "integer"}}),
        ]

    def task(self):
        L = self.horizon
        lines = "\n".join(f"{i}: {self.item(i - 1)}" for i in range(1, L + 1))
        return (f"Start balance: {self.start}. Apply these {L} transactions in order, one apply(amount) "
                f"call each, then call finish(balance) with the final balance.\n{lines}")

    def item(self, index):
        return f"{self.amounts[index]:+d}"

    def init_state(self):
        self.i = 0
        self.balance = self.start
        self.reported: int | None = None

    def expected(self):
        if self.i < self.horizon:
            return ToolCall("apply", {"amount": self.amounts[self.i]})
        return ToolCall("finish", {"balance": self.balance})

    def error_suffix(self):
        return f"; {self.progress(self.i)}"

    def apply(self, call):
        if call.name == "finish":
            self.reported = call.arguments["balance"]
            return "done", True
        self.i += 1
        self.balance += call.arguments["amount"]
        return f"bal {self.balance}; {self.progress(self.i)}", False

    def success(self):
        return self.reported is not None and self.reported == self.final
