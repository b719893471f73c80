"""BFCL single-call categories as short-form items: one greedy turn per item, three scores.

For each item the model sees the user turn and BFCL's functions as tools (through
`qdrift.envs.prompting`: native tools when the chat template has them, else described in the
system message), generates one assistant turn greedily, and the turn is parsed with the prompt's
tool-call parser. Each row scores

    json_valid    the turn holds at least one call, and every call region is well-formed JSON
    schema_valid  ... and every call names a tool and validates (jsonschema) against its schema
    ast_match     ... and the calls are one of BFCL's possible answers (`qdrift.bfcl.ast_match`)

`correct` is `ast_match` (BFCL's own metric for these categories); `item` is BFCL's id. A model
that writes garbage gets rows with all three False, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from qdrift.bfcl.ast_match import ast_match
from qdrift.bfcl.data import load_category, to_tools
from qdrift.envs.parsers import ParsedTurn
from qdrift.envs.schema import ToolSchemas, call_text

SCORES = ("json_valid", "schema_valid", "ast_match")


@dataclass(frozen=True)
class _NoStopParser:
    """A parser that lets generation run past the first call (the hermes parser otherwise stops at the
    first `</tool_call>`): parallel categories expect several calls, the others must fail a second one."""

    inner: Any
    stop_strings: tuple = ()

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def opening(self) -> str:
        return self.inner.opening

    def render(self, call):
        return self.inner.render(call)

    def parse(self, text: str) -> ParsedTurn:
        return self.inner.parse(text)


def score_turn(item: dict, raw: str, parsed: ParsedTurn, category: str) -> dict:
    """The three scores of one generated turn for a BFCL item (see the module docstring)."""
    calls = parsed.calls
    json_valid = bool(calls) and parsed.json_valid
    schemas = ToolSchemas(to_tools(item["functions"]))
    checks = [schemas.check(c) for c in calls]
    schema_valid = json_valid and all(err is None for _, err in checks)
    verdict = ast_match(item["functions"], calls, item["answers"], category) if json_valid else None
    error = parsed.error or next((err for _, err in checks if err), None) or (verdict.error if verdict is not None else None)
    if not calls and error is None:
        error = "no tool call in the turn"
    if calls and not json_valid and error is None:  # the parser's lenient cases: say why nothing was scored
        error = ("a call's arguments were not a JSON object (a JSON-encoded string, or missing): accepted by the "
                 "parser but not valid JSON calls, so not scored against BFCL's answers")
    return {"json_valid": json_valid, "schema_valid": schema_valid, "ast_match": bool(verdict),
            "n_calls": len(calls), "calls": json.dumps([json.loads(call_text(c)) for c in calls]),
            "error": error or None}


def run_bfcl(model: Any, tokenizer: Any, category: str = "simple", limit: int | None = None, *,
             prompt: Any = None, max_new_tokens: int = 128, batch: int = 8) -> list[dict]:
    """One row per item of a BFCL single-call `category` (its first `limit` items, in file order)."""
    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.prompting import tool_prompt_for

    items = load_category(category, limit)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    # Generation runs past the first call in every category: BFCL scores the whole turn, so a model
    # that writes two calls where one is asked fails (stopping at the first `</tool_call>` hid that).
    prompt = prompt or tool_prompt_for(tokenizer)
    prompt = replace(prompt, parser=_NoStopParser(prompt.parser))
    rows = []
    for start in range(0, len(items), batch):
        chunk = items[start:start + batch]
        policy = HFPolicy(model, tokenizer, prompt, max_new_tokens=max_new_tokens)
        policy.start([(it["messages"], to_tools(it["functions"])) for it in chunk], [0] * len(chunk))
        gens = policy.respond(list(range(len(chunk))))
        for r, item in enumerate(chunk):
            gen = gens[r]
            scores = score_turn(item, gen.text, prompt.parser.parse(gen.text), category)
            rows.append({"item": item["id"], "category": category, "correct": scores["ast_match"], **scores,
                         "raw": gen.text, "tokens_in": gen.tokens_in, "tokens_out": gen.tokens_out,
                         "stop_reason": gen.stop_reason, "tool_prompt": prompt.describe()})
    return rows


def rates(rows: list[dict]) -> dict[str, float]:
    """The fraction of rows passing each score, plus n."""
    if not rows:
        raise ValueError("no rows to summarize")
    return {"n": len(rows), **{s: sum(bool(r[s]) for r in rows) / len(rows) for s in SCORES}}
