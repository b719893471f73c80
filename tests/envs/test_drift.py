"""Teacher-forced drift: zero for identical models, positive for quantized ones, equal to a direct
full-sequence reference, and replayed in the same prefill/decode forwards as the recorded run."""

import math

import pytest
import torch

import qdrift
from qdrift.backends.hf import HFPolicy
from qdrift.envs.drift import TokenDrift, record_baseline, summarize_drift, teacher_forced_drift
from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import make_environment
from qdrift.tiny import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def run():
    """Two short greedy episodes of the baseline (two steps each), traced."""
    tok = tiny_tokenizer()
    base = tiny_model("llama")
    envs = [make_environment("pointer_chase", horizon=1, seed=1_000_000 + i) for i in range(2)]
    episodes, steps, traces = record_baseline(HFPolicy(base, tok, tool_prompt_for(tok), max_new_tokens=5), envs)
    return base, steps, traces


def test_the_trace_holds_every_turn_fed_and_generated(run):
    _, steps, traces = run
    assert len(traces) == 2
    for s in steps:
        fed, generated = traces[s.episode][s.step]
        assert (len(fed), len(generated)) == (s.tokens_in, s.tokens_out)


def test_identical_models_drift_exactly_zero(run):
    base, steps, traces = run
    rows = teacher_forced_drift(base, tiny_model("llama"), traces)  # a separate, equal copy
    assert len(rows) == sum(s.tokens_out for s in steps)
    assert all(r.kl == 0.0 and r.top1_agree and r.base_logprob == r.var_logprob for r in rows)
    # The replay reproduces the run: the baseline's own log-probabilities of its tokens (greedy, T=1).
    for s in steps:
        got = sum(r.base_logprob for r in rows if (r.episode, r.step) == (s.episode, s.step))
        assert got == pytest.approx(s.logprob, abs=1e-4)
    summary = summarize_drift(rows)
    assert summary["mean_kl"] == summary["p99_kl"] == summary["flip_rate"] == 0.0


def test_a_two_bit_variant_drifts_and_flips(run):
    base, _, traces = run
    rows = teacher_forced_drift(base, qdrift.quantize(tiny_model("llama"), "w2-a16-kv:16"), traces,
                                episodes=[10, 11], batch_size=1)
    assert {r.episode for r in rows} == {10, 11}
    assert all(r.kl > 0 for r in rows)
    summary = summarize_drift(rows)
    assert summary["flip_rate"] > 0 and summary["mean_kl"] > 0
    assert [p["step"] for p in summary["per_step"]] == sorted({r.step for r in rows})


def test_kl_equals_a_full_sequence_reference_for_a_weight_only_spec(run):
    base, _, traces = run
    variant = qdrift.quantize(tiny_model("llama"), "w4g32-a16-kv:16")
    rows = [r for r in teacher_forced_drift(base, variant, traces) if r.episode == 0]
    ids, targets = [], []  # (position predicting the token, token)
    for fed, generated in traces[0]:
        ids += fed
        for tok in generated:
            targets.append((len(ids) - 1, tok))
            ids.append(tok)
    x = torch.tensor([ids])
    with torch.no_grad():
        lp_b = torch.log_softmax(base(input_ids=x).logits[0].double(), -1)
        lp_v = torch.log_softmax(variant(input_ids=x).logits[0].double(), -1)
    at = torch.tensor([p for p, _ in targets])
    toks = torch.tensor([t for _, t in targets])
    kl = (lp_b[at].exp() * (lp_b[at] - lp_v[at])).sum(-1)
    assert len(rows) == len(targets)
    assert [r.kl for r in rows] == pytest.approx(kl.tolist(), rel=1e-3, abs=1e-6)
    assert [r.var_logprob for r in rows] == pytest.approx(lp_v[at, toks].tolist(), abs=1e-4)
    assert [r.top1_agree for r in rows] == (lp_b[at].argmax(-1) == lp_v[at].argmax(-1)).tolist()


def test_a_kv_cache_only_spec_drifts(run):
    base, _, traces = run
    rows = teacher_forced_drift(base, qdrift.quantize(tiny_model("llama"), "w16-a16-kv:fp8e4m3@unit"), traces)
    assert all(r.kl > 0 for r in rows)


def test_replay_makes_the_same_forwards_as_the_run():
    """Suffixes as multi-token forwards, generated tokens one per forward: phase-split specs see the same phases."""
    tok = tiny_tokenizer()
    model = tiny_model("llama")
    widths = []
    hook = model.model.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape[1]),
                                                 with_kwargs=True)
    _, _, traces = record_baseline(HFPolicy(model, tok, tool_prompt_for(tok), max_new_tokens=4),
                                   [make_environment("pointer_chase", horizon=1, seed=1_000_000)])
    run_widths, widths[:] = list(widths), []
    teacher_forced_drift(model, model, traces)
    hook.remove()
    assert widths[0::2] == widths[1::2] == run_widths  # baseline and variant forwards alternate


def test_summarize_drift_by_hand():
    rows = [TokenDrift(0, 0, 0, 0.0, True, -1.0, -1.0), TokenDrift(0, 0, 1, 2.0, False, -1.0, -3.0),
            TokenDrift(0, 1, 0, 1.0, True, -1.0, -2.0), TokenDrift(1, 1, 0, 1.0, False, -1.0, -2.0)]
    s = summarize_drift(rows)
    assert s["tokens"] == 4
    assert s["mean_kl"] == pytest.approx(1.0)
    assert s["p99_kl"] == pytest.approx(1.0 + 0.97 * 1.0)  # numpy's linear interpolation, 1.0 -> 2.0
    assert s["flip_rate"] == pytest.approx(0.5)
    assert s["per_step"] == [{"step": 0, "tokens": 2, "mean_kl": 1.0, "flip_rate": 0.5},
                             {"step": 1, "tokens": 2, "mean_kl": 1.0, "flip_rate": 0.5}]
    assert summarize_drift([])["tokens"] == 0


def test_kl_with_masked_vocabulary_entries_matches_scipy():
    from scipy.special import rel_entr, softmax

    from qdrift.envs.drift import _compare

    inf = float("inf")
    lb = torch.tensor([2.0, 1.0, -inf, 0.5])
    lv = torch.tensor([1.0, 2.0, -inf, 0.0])
    (d,) = _compare([0], [(None, 1, 3, 0)], {0: (lb, lv)}, {0: 7})
    want = rel_entr(softmax(lb.double().numpy()), softmax(lv.double().numpy())).sum()
    assert math.isfinite(d.kl) and d.kl == pytest.approx(want, rel=1e-12)
    # a token only the variant rules out: the baseline's mass there has no cover, so KL is inf
    (d,) = _compare([0], [(None, 1, 3, 0)], {0: (lv.flip(0), lv)}, {0: 7})
    assert d.kl == inf


@pytest.mark.parametrize("batch_size", [0, -1, 2.5])
def test_a_batch_size_that_is_not_positive_is_refused_not_an_empty_result(batch_size):
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        teacher_forced_drift(model, model, [[([1, 2, 3], [4, 5])]], batch_size=batch_size)
