"""A small base class for deterministic, seedable tool-use environments.

A subclass declares `name`, `knobs` (integer settings with a default and a valid range) and
implements five hooks:

    build(rng)        generate the task from a `random.Random` seeded by (name, seed, knobs)
    make_tools()      the OpenAI function schemas (use `qdrift.envs.schema.function_tool`)
    task()            the user message
    init_state()      set the mutable episode state (called by `reset()`)
    expected()        the correct next call in the current state: the conditional oracle
    apply(call)       apply a schema-valid call, return (observation, finished)
    success()         the final check against the true (unconditional) answer
    perfect_steps()   the number of steps a perfect agent takes

`step()` is shared: it scores the call against `expected()` before applying it; a call that does
not validate (None, unknown tool, missing/extra/mistyped argument) becomes the observation
`error: <message>`, a scored, invalid, incorrect step that leaves the state unchanged. The episode
ends when `apply` says so (the final answer) or when `max_steps` calls have been made. The rng is
not seeded by the horizon, so with the same seed and knobs a shorter task is (for the built-in
environments; for pointer_chase while 2 * (L + 1 + distractors) <= 1000) a prefix of a longer one.
Seeding goes through `random.Random(str)`, which is independent of PYTHONHASHSEED.

Every environment also takes the knob `slack` (default 0): extra turns beyond a perfect agent's,
so `max_steps = perfect_steps() + slack`. Neither `slack` nor `echo` (where an environment has
it) enters the seeding: the same seed gives the same instance with or without them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

from qdrift.envs.base import StepResult, ToolCall
from qdrift.envs.schema import ToolSchemas, call_text

MAX_HORIZON = 10_000
# Knobs that change how an instance is run or shown, not which instance a seed draws.
PRESENTATION_KNOBS = ("slack", "echo")

SYSTEM_PROMPT = (
    "You execute a task step by step with tools. Make exactly one tool call per turn, "
    "with exactly the arguments the task asks for. Tool results are terse and end with the "
    "number of the next step ('next 4'), or 'all L done' once every step is done."
)


@dataclass(frozen=True)
class Knob:
    default: int
    lo: int
    hi: int
    doc: str = ""
    # False for a knob added after instances were published: at its default it stays out of the
    # seed material, so every earlier (env, seed, knobs) still draws the same instance.
    seeds_at_default: bool = True


def check_int(field: str, value: Any, lo: int, hi: int) -> int:
    """`value` as an int in lo..hi, else ValueError naming the field and the valid range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an integer in {lo}..{hi}, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{field} must be in {lo}..{hi}, got {value}")
    return value


class ToolEnv:
    name: ClassVar[str] = "tool_env"
    knobs: ClassVar[dict[str, Knob]] = {}
    max_horizon: ClassVar[int] = MAX_HORIZON
    system_prompt: ClassVar[str] = SYSTEM_PROMPT

    def __init__(self, horizon: int, seed: int, **knobs: Any):
        self.horizon = check_int("horizon", horizon, 1, self.max_horizon)
        self.seed = check_int("seed", seed, 0, 2**63 - 1)
        spec = {**self.knobs, "slack": Knob(0, 0, 10 * self.max_horizon, "extra turns beyond a perfect agent's")}
        unknown = sorted(set(knobs) - set(spec))
        if unknown:
            valid = ", ".join(f"{k} ({v.lo}..{v.hi})" for k, v in spec.items())
            raise ValueError(f"unknown knob '{unknown[0]}' for {self.name}; valid knobs: {valid}")
        self.settings = {k: check_int(k, knobs.get(k, v.default), v.lo, v.hi) for k, v in spec.items()}
        self.check_settings()
        material = "|".join([self.name, str(self.seed)] + [
            f"{k}={v}" for k, v in sorted(self.settings.items())
            if k not in PRESENTATION_KNOBS and (spec[k].seeds_at_default or v != spec[k].default)])
        self.build(random.Random(material))
        self._tools = self.make_tools()
        self._schemas = ToolSchemas(self._tools)
        self.max_steps = self.perfect_steps() + self.settings["slack"]
        self.reset()

    # -- hooks -------------------------------------------------------------------------------
    def check_settings(self) -> None:
        """Cross-knob checks (raise ValueError naming the knob and the valid range)."""

    def build(self, rng: random.Random) -> None:
        raise NotImplementedError

    def make_tools(self) -> list[dict]:
        raise NotImplementedError

    def task(self) -> str:
        raise NotImplementedError

    def init_state(self) -> None:
        raise NotImplementedError

    def expected(self) -> ToolCall:
        raise NotImplementedError

    def apply(self, call: ToolCall) -> tuple[str, bool]:
        raise NotImplementedError

    def success(self) -> bool:
        raise NotImplementedError

    def perfect_steps(self) -> int:
        return self.horizon + 1

    def error_suffix(self) -> str:
        """Appended to an `error:` observation (e.g. to repeat what the current step shows)."""
        return ""

    def worked_note(self) -> str:
        """What a perfect agent writes before the current step's call: its working, where the call needs any.

        Why: training data (qdrift.organism.data) shows the model the intermediate values a call
        is computed from (dict_sum's looked-up values and partial sums), one token each, so no
        single generated token has to look up, copy and add at once. The runner scores the call,
        never this text. Empty (the default) where a call is a copy of what the context shows.
        """
        return ""

    def progress(self, done: int) -> str:
        """The step marker that ends an observation: `next {done + 1}`, or `all {L} done`.

        Why: the environments measure execution (copy the right item, make the right call), not
        counting. Stating the next step's number makes both the item to act on and the moment to
        stop a read of the context rather than an addition or a comparison the agent must do.
        """
        if done >= self.horizon:
            return f"all {self.horizon} done"
        shown = self.item(done) if self.settings.get("echo") else None
        return f"next {done + 1}" + (f": {shown}" if shown is not None else "")

    def item(self, index: int) -> str | None:
        """The task's listed item at 0-based `index`, as the task shows it (environments with a list).

        With the knob `echo=1` the step marker repeats it (`next 4: +17`), so the agent copies the
        item from the last tool result instead of finding it in the task's list by its number; the
        task message then ends with the first step's marker (`next 1: ...`), since no tool result
        precedes the first call.
        """
        return None

    # -- the protocol ------------------------------------------------------------------------
    def knob(self, key: str) -> int:
        return self.settings[key]

    def tools(self) -> list[dict]:
        return self._tools

    def reset(self) -> list[dict]:
        self.t = 0
        self.done = False
        self.init_state()
        task = self.task()
        if self.settings.get("echo") and self.item(0) is not None:
            task += f"\n{self.progress(0)}"  # the first step's marker: no step is left to list indexing
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": task}]

    def oracle(self) -> ToolCall:
        return self.expected()

    def step(self, call: ToolCall | None, raw: str = "") -> StepResult:
        if self.done:
            return StepResult("error: the episode is over", False, False, True, "step after the episode ended")
        want = self.expected()
        checked, err = self._schemas.check(call)
        self.t += 1
        # `done` in the result is the environment's own end (its final answer); running out of turns
        # is the runner's stop (`max_steps`), so the records can tell the two apart. The instance
        # still refuses steps past its cap.
        if checked is None:
            self.done = self.t >= self.max_steps
            return StepResult(f"error: {err}{self.error_suffix()}", False, False, False, err)
        correct = checked == want
        observation, finished = self.apply(checked)
        finished = bool(finished)
        self.done = finished or self.t >= self.max_steps
        return StepResult(observation, correct, True, finished, None if correct else f"expected {call_text(want)}")

    def __repr__(self) -> str:
        knobs = "".join(f", {k}={v}" for k, v in self.settings.items())
        return f"{type(self).__name__}(horizon={self.horizon}, seed={self.seed}{knobs})"
