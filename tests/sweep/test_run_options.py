"""Per-task prompts and the sweep's dtype/device: validated, keyed where they change results, used."""

import pytest
import torch

from qdrift.sweep import SweepError, expand, parse_sweep

BASE = """\
models: [tiny:llama]
specs: [baseline]
tasks:
  - env: pointer_chase
    horizons: [1]
    seeds: 1
"""


def problems(text: str) -> list[str]:
    with pytest.raises(SweepError) as info:
        parse_sweep(text, source="s.yaml")
    return info.value.problems


@pytest.mark.parametrize("prompt, message", [
    ("{mode: chat}", "prompt.mode: unknown mode 'chat'; valid modes: auto, native, prompted"),
    ("{parser: hermez}", "prompt.parser: unknown format 'hermez' (did you mean 'hermes'?)"),
    ("{prefill_extra: '{\"name\": \"'}", "set prefill_opening: true too"),
    ("{prefill_opening: yes please}", "prompt.prefill_opening: must be true or false"),
    ("{prefil_opening: true}", "unknown key 'prefil_opening' (did you mean 'prefill_opening'?)"),
])
def test_bad_prompts_name_what_is_valid(prompt, message):
    found = problems(BASE + f"    prompt: {prompt}\n")
    assert any(message in p and "tasks[0].prompt" in p for p in found), found


def test_a_prompt_enters_the_key_only_when_set():
    plain = expand(parse_sweep(BASE))[0]
    prompted = expand(parse_sweep(BASE + "    prompt: {mode: prompted, parser: hermes, prefill_opening: true}\n"))[0]
    assert "prompt" not in plain.config()
    assert prompted.config()["prompt"] == {"mode": "prompted", "parser": "hermes", "prefill_opening": True}
    assert prompted.key != plain.key


def test_the_cell_runs_with_the_tasks_prompt(monkeypatch):
    from qdrift.envs import prompting
    from qdrift.sweep.runners import CellRunner

    seen = []
    real = prompting.tool_prompt_for
    monkeypatch.setattr(prompting, "tool_prompt_for", lambda tok, **kw: seen.append(kw) or real(tok, **kw))
    cell = expand(parse_sweep(BASE + "    max_new_tokens: 4\n    prompt: {mode: prompted, prefill_opening: true}\n"))[0]
    rows = CellRunner(batch=1)(cell)
    assert seen == [{"mode": "prompted", "prefill_opening": True}]
    assert rows["step"][0]["raw"].startswith("<tool_call>")  # the prefilled opening is part of the call text


def test_dtype_enters_the_key_and_so_does_a_gpu_but_not_the_cpu():
    plain = expand(parse_sweep(BASE))[0]
    bf16 = expand(parse_sweep(BASE + "dtype: bfloat16\n"))[0]
    cpu = expand(parse_sweep(BASE + "device: cpu\n"))[0]
    gpu0, gpu1 = (expand(parse_sweep(BASE + f"device: {d}\n"))[0] for d in ("cuda", "cuda:1"))
    assert bf16.config()["dtype"] == "bfloat16" and bf16.key != plain.key
    assert cpu.key == plain.key and "device" not in cpu.config()  # stores made before keep their keys
    # a GPU rounds differently from the CPU: its cells never resume CPU results (any index alike)
    assert gpu0.config()["device"] == "cuda" and gpu0.key != plain.key and gpu1.key == gpu0.key
    assert gpu0.baseline().key != plain.baseline().key  # its variants pair with the GPU's baseline


@pytest.mark.parametrize("line, message", [
    ("dtype: fp16", "dtype: unknown dtype 'fp16'"),
    ("device: gpu", "device: 'gpu' is not a device; valid: cpu, cuda, cuda:<index>"),
])
def test_bad_dtype_or_device_is_named(line, message):
    assert any(message in p for p in problems(BASE + line + "\n"))


def test_models_load_in_the_sweeps_dtype_and_a_missing_cuda_device_is_a_clear_error():
    from qdrift.sweep.models import ModelCache

    model, _ = ModelCache(dtype="bfloat16").base("tiny:llama")
    assert next(model.parameters()).dtype == torch.bfloat16
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="torch sees no CUDA device.*drop 'device:'"):
            ModelCache(device="cuda").base("tiny:llama")


def test_a_cell_whose_spec_defers_kv_quantization_runs_batched_and_gives_each_seed_what_it_gives_alone():
    # Token blocks and the full-precision window count each row's real tokens, so batching (padding)
    # changes no row's result.
    from qdrift.sweep.runners import CellRunner

    text = BASE.replace("specs: [baseline]", "specs: [w16-a16-kv:4@dyn-win4]").replace("seeds: 1", "seeds: 3")
    cell = expand(parse_sweep(text + "    max_new_tokens: 4\n"))[0]
    batched, alone = CellRunner(batch=3)(cell), CellRunner(batch=1)(cell)
    assert len(batched["episode"]) == 3
    def steps(rows):
        return sorted(rows["step"], key=lambda s: (s["seed"], s["step"]))

    assert batched["step"] and [s["raw"] for s in steps(batched)] == [s["raw"] for s in steps(alone)]
    # the log-probabilities too: counted over padded columns they moved
    assert [s["logprob"] for s in steps(batched)] == pytest.approx([s["logprob"] for s in steps(alone)], abs=1e-5)
