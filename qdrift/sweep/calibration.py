"""Calibration data for specs with static scales (`@static` KV, static activations) in a sweep.

A static scale is set from ranges seen on calibration inputs, so the inputs are part of what a
cell measures: the sweep file names them (`calibration:`) and they enter the key of every cell
whose spec calibrates. The source is oracle trajectories of an environment on *training* seeds
(disjoint from every held-out seed a cell evaluates on), rendered through the model's own tool
prompt, so the scales come from the kind of context the cells then run in, never from the test
episodes themselves.

    calibration:
      env: pointer_chase      # a built-in environment or path/to/file.py@Class
      horizon: 16             # optional (default 16)
      samples: 8              # optional (default 8): training seeds 0..samples-1
      knobs: {echo: 1}        # optional environment knobs
      prompt: {...}           # optional, how the trajectories are rendered (as an agent task's prompt:)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KEYS = ("env", "horizon", "samples", "knobs", "prompt")


@dataclass(frozen=True)
class Calibration:
    env: str
    horizon: int = 16
    samples: int = 8
    knobs: tuple[tuple[str, int], ...] = ()
    prompt: tuple[tuple[str, Any], ...] = ()  # tool_prompt_for options
    # sha256 of a path environment's file (None for a built-in one, which goes with qdrift_version), read
    # when a cell is made (`cells.make_cell`, `with_source`): editing the file gives the cells new keys.
    env_sha256: str | None = None

    def config(self) -> dict[str, Any]:
        out = {"env": self.env, "horizon": self.horizon, "samples": self.samples, "knobs": dict(self.knobs)}
        if self.prompt:
            out["prompt"] = dict(self.prompt)
        if self.env_sha256 is not None:  # only when set, so cells calibrated on built-in environments keep their keys
            out["env_sha256"] = self.env_sha256
        return out

    def with_source(self) -> Calibration:
        """This calibration with its environment file's sha256 as it reads now (`path_source_sha256`)."""
        from dataclasses import replace

        from qdrift.envs.registry import path_source_sha256

        return replace(self, env_sha256=path_source_sha256(self.env))

    def batches(self, tokenizer) -> list:
        """One input-id tensor per training seed: the oracle conversation as the model's prompt renders it."""
        from qdrift.envs.prompting import tool_prompt_for
        from qdrift.envs.registry import make_environment

        prompt = tool_prompt_for(tokenizer, **dict(self.prompt))

        out = []
        for seed in range(self.samples):
            env = make_environment(self.env, horizon=self.horizon, seed=seed, split="train", **dict(self.knobs))
            text = prompt.render(tokenizer, oracle_conversation(env, prompt), env.tools(), add_generation_prompt=False)
            out.append(tokenizer(text, return_tensors="pt", add_special_tokens=False).input_ids)
        return out


def oracle_conversation(env, prompt) -> list[dict]:
    """The conversation a perfect agent has with `env` (reset first), each call written in
    `prompt`'s format and shaped as the episode runner shapes its messages."""
    from qdrift.envs.prompting import assistant_message, tool_message

    messages = env.reset()
    while True:
        call = env.oracle()
        raw = prompt.parser.render(call)
        result = env.step(call, raw)
        messages.append(assistant_message(raw, prompt.parser.parse(raw)))
        if result.done:
            return messages
        messages.append(tool_message(result.observation, call.name))


def needs_calibration(spec: str) -> bool:
    """Whether `spec` ('baseline' or a canonical spec) has static scales to calibrate."""
    if spec == "baseline":
        return False
    from qdrift.spec import QuantSpec

    return any(x.source == "static" for x in QuantSpec.parse(spec).per_forward)
