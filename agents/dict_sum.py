"""DictSum: keep a running sum of looked-up values, one report per turn.

After "The Illusion of Diminishing Returns: Measuring Long Horizon Execution in LLMs" (Sinha et
al., 2025). The task gives a table of keys and small integer values and the first turn's keys;
each later turn's keys come in the previous tool result (`2/7 k4 k11`: turn 2 of 7). At each turn
the agent adds the values of the named keys (knob `k`, default 1) to its running total (from 0)
and calls `report(total)`. The oracle is conditional on the agent's previously reported total
(per-step accuracy); `success()` requires the last report to equal the true cumulative sum.
"""

from __future__ import annotations

from qdrift.envs.base import ToolCall
from qdrift.envs.schema import function_tool
from qdrift.envs.table_keys import KEY_SPACE, table_keys
from qdrift.envs.toolenv import Knob, ToolEnv


class DictSum(ToolEnv):
    name = "dict_sum"
    knobs = {
        "k": Knob(1, 1, 32, "keys named per turn"),
        "keys": Knob(20, 1, 1000, "table size"),
        "vmax": Knob(9, 1, 999, "values are integers in -vmax..vmax"),
        "keyspace": Knob(0, 0, KEY_SPACE, "0: the table is k0..k{keys-1} in order; else `keys` keys drawn from "
                                          "k0..k{keyspace-1}, in random order", seeds_at_default=False),
    }

    def check_settings(self):
        space, keys = self.knob("keyspace"), self.knob("keys")
        if space and space < keys:
            raise ValueError(f"dict_sum: keyspace={space} has fewer keys than the table's keys={keys}; "
                             f"valid: 0 (the keys k0..k{keys - 1}) or keyspace >= keys")

    def build(self, rng):
        v = self.knob("vmax")
        # Why `keyspace`: a model trained on tables that are always k0..k19 in order miscopied those
        # keys where they are plain values (pointer chasing: k13 written as k14; model card, run 19).
        names = table_keys(rng, self.knob("keys"), self.knob("keyspace"))
        self.table = {key: rng.randint(-v, v) for key in names}
        self.turns = [[rng.choice(names) for _ in range(self.knob("k"))] for _ in range(self.horizon)]
        self.totals = []
        total = 0
        for keys in self.turns:
            total += sum(self.table[key] for key in keys)
            self.totals.append(total)

    def make_tools(self):
        return [function_tool("report", "Report the running total after this turn's keys.",
                              {"total": {"type": "integer"}})]

    def turn_text(self, i: int) -> str:
        return f"{i + 1}/{self.horizon} " + " ".join(self.turns[i])

    def task(self):
        table = " ".join(f"{k}={v}" for k, v in self.table.items())
        return (f"Table: {table}\nEach turn names keys as 'turn/turns key...'. Add their values to a running "
                f"total that starts at 0 and call report(total) with the new total. {self.horizon} turns.\n"
                f"{self.turn_text(0)}")

    def perfect_steps(self):
        return self.horizon

    def init_state(self):
        self.i = 0
        self.total = 0
        self.reports: list[int] = []

    def expected(self):
        i = min(self.i, self.horizon - 1)
        return ToolCall("report", {"total": self.total + sum(self.table[k] for k in self.turns[i])})

    def worked_note(self):
        # `k4=-8 k7=2 -3 -8 = -11 2 = -9`: each key's value, then the previous total and one
        # `addend = partial sum` per value, the format of the dense running sums
        # (qdrift.organism.dense_tasks); the call then copies the last partial sum.
        keys = self.turns[min(self.i, self.horizon - 1)]
        note, total = [f"{k}={self.table[k]}" for k in keys] + [str(self.total)], self.total
        for k in keys:
            total += self.table[k]
            note.append(f"{self.table[k]} = {total}")
        return " ".join(note) + "\n"

    def error_suffix(self):
        return f" | {self.turn_text(self.i)}" if self.i < self.horizon else ""

    def apply(self, call):
        self.total = call.arguments["total"]
        self.reports.append(self.total)
        self.i += 1
        if self.i >= self.horizon:
            return "done", True
        return self.turn_text(self.i), False

    def success(self):
        return len(self.reports) >= self.horizon and self.reports[-1] == self.totals[-1]
