"""BFCL multi-turn: a Berkeley Function Calling Leaderboard v4 task on its executable backends.

One episode is one BFCL entry (from the installed bfcl-eval, see qdrift/bfcl/PROVENANCE.md): a few
user turns (file system, messaging, trading, travel, vehicle control, ...), BFCL's function docs as
tools, and BFCL's Python backend classes executing every call. The entry is `entry` (an index into
the category's usable entries) or else `seed` mod their number; BFCL has no training split, so
every entry is evaluation data. `horizon` caps the number of user turns played; `env.horizon` is
then the number of ground-truth calls in them (the steps a perfect agent makes).

Steps: turn k gives the agent exactly as many calls as BFCL's ground truth makes in that turn;
the oracle for each step is the next ground-truth call (arguments compared with the backend's
defaults filled in). After the last call of a turn, BFCL's state and response checks compare the
agent's backend instances with ground-truth instances that executed the ground-truth calls; the
next user message then comes back appended to the tool result ("User: ..."), because the episode
runner feeds tool results only. As in BFCL, a turn in which the agent made no parseable call fails
before those checks. `success()` is BFCL's verdict: every turn passed.

Knobs: `category` ("multi_turn_base" or "multi_turn_long_context"), `entry` (int or None).
"""

from __future__ import annotations

from qdrift.bfcl.data import to_tools
from qdrift.bfcl.multi_turn import (
    canonical,
    check_turn,
    execute,
    load_multi_turn,
    make_instances,
    method_table,
    parse_call_string,
    usable_entry_ids,
)
from qdrift.envs.base import StepResult, ToolCall
from qdrift.envs.schema import ToolSchemas, call_text

SYSTEM_PROMPT = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. "
    "Based on the question, make one function call per turn to achieve the purpose. Function results come "
    "back to you; later requests from the user follow them."
)


class BFCLMultiTurn:
    name = "bfcl_multi_turn"
    eval_only = True  # BFCL has no training split: make_environment(..., split="train") refuses it

    def __init__(self, horizon: int, seed: int, category: str = "multi_turn_base", entry: int | None = None,
                 **unknown):
        if unknown:
            raise ValueError(f"unknown knob(s) {', '.join(sorted(unknown))} for {self.name}; its knobs are "
                             "category and entry (no slack: each user turn allows exactly BFCL's ground-truth "
                             "calls)")
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"horizon (the most user turns to play) must be a positive integer, got {horizon!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        entries = load_multi_turn(category)
        entry = self._entry_index(seed, category, entry)
        self.seed, self.category, self.entry_index = seed, category, entry
        self.entry = entries[entry]
        self.turns = self.entry["turns"][:horizon]
        self.truth_turns = self.entry["ground_truth"][:horizon]
        self.horizon = sum(len(t) for t in self.truth_turns)
        self.max_steps = self.horizon
        self._tools = to_tools(self.entry["functions"])
        self._schemas = ToolSchemas(self._tools)
        methods = method_table(make_instances(self.entry))
        self.truth_calls = [[parse_call_string(s, methods) for s in turn] for turn in self.truth_turns]
        self.flat_truth = [c for turn in self.truth_calls for c in turn]
        self.reset()

    @classmethod
    def instance_key(cls, seed: int, category: str = "multi_turn_base", entry: int | None = None, **_knobs) -> str:
        """The BFCL entry a seed plays, without building the episode (a sweep asks it for every seed):
        seeds that give the same entry are the same item."""
        return usable_entry_ids(category)[cls._entry_index(seed, category, entry)]

    @staticmethod
    def _entry_index(seed: int, category: str, entry: int | None) -> int:
        """The index of the entry a seed plays: `entry` when given (checked), else the seed's."""
        count = len(usable_entry_ids(category))
        if entry is None:
            return seed % count
        if isinstance(entry, bool) or not isinstance(entry, int) or not 0 <= entry < count:
            raise ValueError(f"entry must be an integer in 0..{count - 1} for {category}, got {entry!r}")
        return entry

    def tools(self) -> list[dict]:
        return self._tools

    def reset(self) -> list[dict]:
        self.model_instances = make_instances(self.entry)
        self.truth_instances = make_instances(self.entry)
        self.model_methods = method_table(self.model_instances)
        self.truth_methods = method_table(self.truth_instances)
        self.t = 0
        self.turn = 0
        self.in_turn = 0
        self.done = False
        self.model_results: list[str] = []
        self.turn_verdicts: list[dict] = []
        self.turn_calls = 0  # calls the agent made (parsed) in the current turn
        return [{"role": "system", "content": SYSTEM_PROMPT}, *self.turns[0]]

    def oracle(self) -> ToolCall:
        return self.flat_truth[min(self.t, len(self.flat_truth) - 1)]

    def step(self, call: ToolCall | None, raw: str = "") -> StepResult:
        if self.done:
            return StepResult("error: the episode is over", False, False, True, "step after the episode ended")
        want = self.oracle()
        self.turn_calls += call is not None
        checked, err = self._schemas.check(call)
        if checked is None:
            observation, correct, valid = f"error: {err}", False, False
        else:
            mine = canonical(checked, self.model_methods)
            correct = mine is not None and mine == canonical(want, self.model_methods)
            observation, valid = execute(checked, self.model_methods), True
            self.model_results.append(observation)
        self.t += 1
        self.in_turn += 1
        if self.in_turn == len(self.truth_calls[self.turn]):
            self._end_turn()
            if self.turn < len(self.turns):
                observation += "\n\nUser: " + "\n".join(m["content"] for m in self.turns[self.turn])
        error = None if correct else (err or f"expected {call_text(want)}")
        return StepResult(observation, correct, valid, self.done, error)

    def _end_turn(self) -> None:
        truth_results = [execute(c, self.truth_methods) for c in self.truth_calls[self.turn]]
        if not self.turn_calls:
            # BFCL's multi-turn checker fails a turn with no model call before its state and response
            # checks: a read-only turn leaves the state as it was, and its answer may already be among
            # earlier results, so those checks alone would pass a turn the agent never acted in
            verdict = {"valid": False, "error_message": f"Model response list is empty for turn {self.turn}",
                       "error_type": "multi_turn:empty_turn_model_response"}
        else:
            verdict = check_turn(self.model_instances, self.truth_instances, list(self.model_results),
                                 truth_results, self.turn)
        self.turn_verdicts.append(verdict)
        self.turn += 1
        self.in_turn = 0
        self.turn_calls = 0
        self.done = self.turn >= len(self.turns)

    def success(self) -> bool:
        return self.done and len(self.turn_verdicts) == len(self.turns) and all(v["valid"] for v in self.turn_verdicts)

    def __repr__(self) -> str:
        return (f"BFCLMultiTurn(horizon={self.horizon}, seed={self.seed}, category={self.category!r}, "
                f"entry={self.entry_index} ({self.entry['id']}))")
