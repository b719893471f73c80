"""The environment protocol: what an agent environment gives the episode runner.

An environment is deterministic given (horizon, seed). Every step is scored against a per-step
oracle, the correct next call given the trajectory so far (so a step is judged on its own, even
after an earlier mistake). A malformed call is an observation and a scored step, never a crash:
`step()` must not raise on anything a model can emit, and must never eval or exec model output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ToolCall:
    """A parsed function call: the tool name and its JSON arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StepResult:
    observation: str  # the tool result (or error message) shown to the agent
    correct: bool  # the call equals the oracle's call for this step
    valid: bool  # a known tool, with arguments that validate against its JSON schema
    done: bool  # the environment ended the episode (e.g. its final answer); running out of turns is the runner's `max_steps` stop
    error: str | None = None  # why the call was rejected or wrong, for the records


@runtime_checkable
class Environment(Protocol):
    name: str  # registry name, e.g. "pointer_chase"
    horizon: int  # L, the number of execution steps the task asks for
    seed: int
    max_steps: int  # hard cap on agent turns (the runner stops the episode there)

    def tools(self) -> list[dict]:
        """OpenAI function-calling schemas: [{"type": "function", "function": {name, description, parameters}}]."""

    def reset(self) -> list[dict]:
        """Start (or restart) the episode; return the initial chat messages (system + user task)."""

    def oracle(self) -> ToolCall:
        """The correct next call in the current state."""

    def step(self, call: ToolCall | None, raw: str = "") -> StepResult:
        """Apply the agent's call (None: nothing parseable in `raw`); score it against the oracle first."""

    def success(self) -> bool:
        """Whether the episode achieved the task (checked at the end)."""
