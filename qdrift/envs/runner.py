"""Run agent episodes in batches and score every step against the environment's oracle.

The policy seam is small: `start(conversations, seeds)`, `respond(rows) -> {row: Generation}`,
`extend(row, messages, tools)`, `describe()`. A local transformers model implements it with a
reused KV cache (qdrift.backends.hf); an endpoint client can implement it by sending messages.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from qdrift.envs.base import Environment, ToolCall
from qdrift.envs.schema import ToolSchemas, call_text


@dataclass(frozen=True)
class StepRecord:
    episode: int
    env: str
    horizon: int
    seed: int
    step: int
    raw: str
    call: str | None  # the parsed call as JSON text, or None
    json_valid: bool  # the turn holds a call and every call region is strict JSON (a turn with none is not)
    schema_valid: bool
    correct: bool  # equals the oracle's call
    oracle: str
    observation: str
    tokens_in: int
    tokens_out: int
    logprob: float
    stop_reason: str
    parse_error: str | None
    policy_error: str | None = None  # the backend failed to produce this turn (e.g. an endpoint request failed)

    def row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class EpisodeRecord:
    episode: int
    env: str
    horizon: int
    seed: int
    trial: int
    success: bool
    steps: int
    first_error_step: int | None  # 0-based index of the first incorrect step, None if every step was right
    stop_reason: str  # "done" (the environment ended it) | "max_steps" (out of turns) | "kv_integrity" (its cache pages failed the check)

    def row(self) -> dict:
        return asdict(self)


def _call_json(call: ToolCall | None) -> str | None:
    return None if call is None else call_text(call)


def run_episodes(policy, envs: list[Environment], *, trials: list[int] | None = None, first_id: int = 0):
    """Advance all `envs` in lockstep with `policy`; return (episode records, step records)."""
    parser = policy.prompt.parser
    convs = [(env.reset(), env.tools()) for env in envs]
    # Checked here, independently of the environment's own scoring, so every result's validity
    # means the same thing whatever environment produced it.
    schemas = [ToolSchemas(tools) for _, tools in convs]
    policy.start(convs, [env.seed for env in envs])
    steps: list[StepRecord] = []
    done: dict[int, EpisodeRecord] = {}
    first_error: dict[int, int | None] = {r: None for r in range(len(envs))}
    taken = {r: 0 for r in range(len(envs))}
    trials = trials or [0] * len(envs)

    def finish(r: int, reason: str) -> None:
        env = envs[r]
        # A turn generated over cache pages that failed the check is not judged: nothing after them
        # can be trusted, the answer it may have given included.
        done[r] = EpisodeRecord(first_id + r, env.name, env.horizon, env.seed, trials[r],
                                bool(env.success()) if reason != "kv_integrity" else False,
                                taken[r], first_error[r], reason)

    active = list(range(len(envs)))
    while active:
        gens = policy.respond(active)
        still = []
        for r in active:
            env, gen = envs[r], gens[r]
            parsed = parser.parse(gen.text)
            # One call a turn: the first region's. A malformed first call is not rescued by a later one.
            call = parsed.calls[0] if parsed.calls and not parsed.leading_error else None
            oracle = env.oracle()
            result = env.step(call, gen.text)
            if not result.correct and first_error[r] is None:
                first_error[r] = taken[r]
            steps.append(StepRecord(
                first_id + r, env.name, env.horizon, env.seed, taken[r], gen.text, _call_json(call),
                parsed.json_valid and call is not None, schemas[r].check(call)[1] is None, result.correct, _call_json(oracle),
                result.observation, gen.tokens_in, gen.tokens_out, gen.logprob, gen.stop_reason,
                parsed.error, getattr(gen, "error", None)))
            taken[r] += 1
            messages = convs[r][0]
            messages.append({"role": "assistant", "content": gen.text})
            if gen.stop_reason == "kv_integrity":  # its cache can no longer be trusted: no later turn either
                finish(r, "kv_integrity")
                continue
            if result.done:
                finish(r, "done")
                continue
            if taken[r] >= env.max_steps:
                finish(r, "max_steps")
                continue
            messages.append({"role": "tool", "name": call.name if call else "", "content": result.observation})
            policy.extend(r, messages, convs[r][1])  # a template that is not prefix-stable raises here
            still.append(r)
        active = still
    return [done[r] for r in range(len(envs))], steps
