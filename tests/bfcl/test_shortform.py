"""The BFCL short-form runner: well-formed rows on real models, garbage scored invalid, the sweep seam."""

from __future__ import annotations

import json

import pytest

from qdrift.bfcl.data import load_category
from qdrift.bfcl.shortform import rates, run_bfcl, score_turn
from qdrift.envs.parsers import get_parser
from tests.bfcl.conftest import requires_bfcl

FIELDS = {"item", "category", "correct", "json_valid", "schema_valid", "ast_match", "n_calls", "calls", "error",
          "raw", "tokens_in", "tokens_out", "stop_reason", "tool_prompt"}


def _check_rows(rows, category, n):
    assert [r["item"] for r in rows] == [i["id"] for i in load_category(category, n)]
    for r in rows:
        assert FIELDS <= set(r)
        assert r["correct"] == r["ast_match"]
        assert r["ast_match"] <= r["schema_valid"] <= r["json_valid"]  # each score implies the previous
        assert isinstance(json.loads(r["calls"]), list)


@pytest.fixture(scope="module")
def organism():
    from qdrift.organism import load_organism

    return load_organism()


@requires_bfcl
def test_garbage_from_a_random_model_gives_invalid_rows():
    from qdrift.tiny import tiny_model, tiny_tokenizer

    rows = run_bfcl(tiny_model("llama").eval(), tiny_tokenizer(), "simple", 2, max_new_tokens=8)
    _check_rows(rows, "simple", 2)
    assert not any(r["json_valid"] or r["schema_valid"] or r["ast_match"] for r in rows)
    assert all(r["error"] for r in rows)


@requires_bfcl
@pytest.mark.parametrize("category", ["simple", "parallel"])
def test_organism_rows_are_well_formed(organism, category):
    model, tok = organism
    rows = run_bfcl(model, tok, category, 2, max_new_tokens=24)
    _check_rows(rows, category, 2)
    assert rates(rows)["n"] == 2


@requires_bfcl
def test_scores_of_a_right_a_mistyped_and_a_broken_turn():
    item = load_category("simple", 1)[0]  # calculate_triangle_area(base=10, height=5)
    parser = get_parser("hermes")

    def score(raw):
        return score_turn(item, raw, parser.parse(raw), "simple")

    right = score('<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}\n</tool_call>')
    assert (right["json_valid"], right["schema_valid"], right["ast_match"]) == (True, True, True)
    typed = score('<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": "10", "height": 5}}\n</tool_call>')
    assert (typed["json_valid"], typed["schema_valid"], typed["ast_match"]) == (True, False, False)
    assert "expected integer" in typed["error"]
    wrong = score('<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": 11, "height": 5}}\n</tool_call>')
    assert (wrong["json_valid"], wrong["schema_valid"], wrong["ast_match"]) == (True, True, False)
    assert "parameter 'base': 11 is not one of [10]" in wrong["error"]
    broken = score('<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": 10,\n</tool_call>')
    assert (broken["json_valid"], broken["schema_valid"], broken["ast_match"]) == (False, False, False)
    text = score("The area is 25.")
    assert text["json_valid"] is False and text["error"] == "no tool call in the turn"
    encoded = score('<tool_call>\n{"name": "calculate_triangle_area", "arguments": "{\\"base\\": 10, \\"height\\": 5}"}'
                    '\n</tool_call>')
    assert (encoded["json_valid"], encoded["ast_match"]) == (False, False)
    assert "not a JSON object" in encoded["error"]  # says why nothing was scored


@requires_bfcl
def test_a_second_call_where_one_is_asked_is_generated_and_fails(monkeypatch):
    # The turn is generated as a policy would, stopping at the parser's stop strings: stopping at the
    # first `</tool_call>` hid the second call, and the turn scored as BFCL's answer.
    from types import SimpleNamespace

    import qdrift.backends.hf as hf
    from qdrift.envs.prompting import ToolPrompt

    call = '<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}\n</tool_call>'

    class CannedPolicy:
        def __init__(self, model, tokenizer, prompt, max_new_tokens):
            self.stops = prompt.parser.stop_strings

        def start(self, conversations, seeds):
            self.n = len(conversations)

        def respond(self, rows):
            text = call + "\n" + call
            cut = min((text.index(s) + len(s) for s in self.stops if s in text), default=len(text))
            return {r: SimpleNamespace(text=text[:cut], tokens_in=1, tokens_out=1, stop_reason="eos") for r in rows}

    monkeypatch.setattr(hf, "HFPolicy", CannedPolicy)
    prompt = ToolPrompt(mode="prompted", parser=get_parser("hermes"), prefill_opening=False)
    (row,) = run_bfcl(None, None, "simple", 1, prompt=prompt)
    assert row["n_calls"] == 2 and row["ast_match"] is False


@requires_bfcl
def test_registered_as_sweep_runner():
    from qdrift.sweep.file import ShortFormTask
    from qdrift.sweep.shortform import check_items, lookup
    from qdrift.tiny import tiny_model, tiny_tokenizer

    runner = lookup("bfcl")
    task = ShortFormTask(runner="bfcl", task="multiple", limit=1, options=(("max_new_tokens", 4),))
    rows = check_items("bfcl", runner(tiny_model("llama").eval(), tiny_tokenizer(), task))
    assert [r["item"] for r in rows] == ["multiple_0"]


@requires_bfcl
def test_cli_prints_rates_and_writes_rows(tmp_path, capsys):
    from qdrift.cli import main

    out = tmp_path / "rows.jsonl"
    assert main(["bfcl", "--model", "tiny:llama", "--limit", "2", "--max-new-tokens", "4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "json valid 0.000   schema valid 0.000   AST match 0.000" in text
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["spec"] == "baseline" and rows[0]["model"] == "tiny:llama"
    with pytest.raises(SystemExit, match="not supported: it is scored on abstaining"):
        main(["bfcl", "--category", "irrelevance"])


@pytest.mark.parametrize("flag", ["--limit", "--batch"])
def test_bfcl_numbers_below_one_are_usage_errors(flag, capsys):
    from qdrift.cli import main

    with pytest.raises(SystemExit) as info:
        main(["bfcl", flag, "0"])
    assert info.value.code == 2 and f"{flag}: must be an integer >= 1" in capsys.readouterr().err
