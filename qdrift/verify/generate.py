"""Make a request file from agent environments by rolling each instance's oracle trajectory.

For every (environment, horizon, seed) the oracle plays the episode perfectly; at chosen steps the
conversation so far (system + task, then each earlier call as an assistant `tool_calls` message and
its result as a `tool` message) becomes one request body with the environment's tools. The steps
are the first, a middle one, the last non-final call and the final-answer call, where the right
response is a tool call, and one more after the episode has ended, where the right response is a
plain reply with no tool call, so trigger precision is tested as well as recall. Each request's
metadata records the expected call (or None), so an endpoint's answers can also be scored against
the oracle. Tool-call ids follow `functions.<name>:<index>`, the form K2 models expect in history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from qdrift.verify.requests import VerifyRequest

STEP_CHOICES = ("sample", "all")
HELDOUT_SEED0 = 1_000_000


def _call_message(name: str, arguments: dict, index: int) -> tuple[dict, str]:
    call_id = f"functions.{name}:{index}"
    msg = {"role": "assistant", "content": "", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}
    return msg, call_id


def _chosen(n_calls: int, steps: str) -> list[int]:
    """Indices of the oracle's calls to ask for (plus n_calls, the step after the episode ended)."""
    if steps == "all":
        picks = set(range(n_calls))
    else:
        picks = {0, n_calls // 2, n_calls - 2, n_calls - 1}
    return sorted(i for i in picks if 0 <= i < n_calls) + [n_calls]


def episode_requests(env, steps: str = "sample", id_prefix: str | None = None) -> list[VerifyRequest]:
    """Requests from one environment instance (it is reset and played by its oracle)."""
    if steps not in STEP_CHOICES:
        raise ValueError(f"steps must be one of {', '.join(STEP_CHOICES)}, got {steps!r}")
    messages = env.reset()
    tools = env.tools()
    history: list[list[dict]] = [list(messages)]
    calls = []
    while True:
        want = env.oracle()
        result = env.step(want)
        if not (result.valid and result.correct):
            raise RuntimeError(f"{env!r}: the oracle's own call {want} was rejected ({result.error}); "
                               "the environment is inconsistent")
        msg, call_id = _call_message(want.name, want.arguments, len(calls))
        calls.append(want)
        messages = messages + [msg, {"role": "tool", "tool_call_id": call_id, "content": result.observation}]
        history.append(list(messages))
        if result.done:
            break
        if len(calls) > env.max_steps:
            raise RuntimeError(f"{env!r}: the oracle did not finish within max_steps={env.max_steps}")
    prefix = id_prefix or f"{env.name}-L{env.horizon}-s{env.seed}"
    out = []
    for t in _chosen(len(calls), steps):
        final = t == len(calls) - 1
        expected = None if t == len(calls) else {"name": calls[t].name, "arguments": calls[t].arguments}
        kind = "after_final" if expected is None else ("final" if final else "tool")
        meta = {"env": env.name, "horizon": env.horizon, "seed": env.seed, "step": t, "kind": kind,
                "expected": expected}
        out.append(VerifyRequest(f"{prefix}-t{t}", {"messages": history[t], "tools": tools}, meta))
    return out


def make_requests(envs: Iterable[str], horizons: Iterable[int], seeds: int | Iterable[int],
                  steps: str = "sample", **knobs) -> list[VerifyRequest]:
    """Requests for every environment x horizon x seed; an int `seeds` means that many held-out seeds.

    An environment may carry its knobs as `name:knob=INT,...` (`ledger:echo=1`), as the agents
    command and the sweeps take them; `knobs` apply to every environment."""
    from qdrift.envs.registry import make_environment, parse_env_entry

    seed_list = list(range(HELDOUT_SEED0, HELDOUT_SEED0 + seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise ValueError("seeds must name at least one seed (or be a positive count)")
    out = []
    for entry in envs:
        name, own = parse_env_entry(entry)
        for horizon in horizons:
            for seed in seed_list:
                out += episode_requests(make_environment(name, horizon=horizon, seed=seed, **own, **knobs), steps)
    return out
