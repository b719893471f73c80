"""qdrift's eager expert-bank forward reproduces transformers' own, so activation quantization is all it adds."""

import pytest
import torch

from qdrift.quant import experts
from qdrift.tiny import tiny_model

MOE = ["mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "glm4_moe"]


@pytest.mark.parametrize("arch", MOE)
@pytest.mark.parametrize("implementation", ["eager", "grouped_mm"])
def test_reproduced_forward_matches_the_original(arch, implementation):
    model = tiny_model(arch)
    model.set_experts_implementation(implementation)
    bank_name, bank = next((n, m) for n, m in model.named_modules() if type(m).__name__ in experts.KNOWN)
    hidden = torch.randn(6, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    n_exp = bank.num_experts
    idx = torch.stack([torch.randperm(n_exp)[:2] for _ in range(6)])
    weights = torch.rand(6, 2)
    with torch.no_grad():
        ref = bank(hidden, idx, weights)
        experts.install(bank, bank_name, lambda: (None, None))
        out = bank(hidden, idx, weights)
        experts.uninstall(bank)
        again = bank(hidden, idx, weights)
    # Bit-exact against the eager loop it reproduces; grouped kernels sum in another order.
    tol = {"rtol": 0, "atol": 0} if implementation == "eager" else {"rtol": 1e-5, "atol": 1e-7}
    torch.testing.assert_close(out, ref, **tol)
    assert torch.equal(again, ref)


def test_unknown_expert_bank_with_activation_quant_is_refused():
    class OddExperts(torch.nn.Module):
        pass

    with pytest.raises(ValueError, match="not supported: qdrift reproduces the eager forward"):
        experts.install(OddExperts(), "model.layers.0.mlp.experts", lambda: (None, None))


def _int4_groups_along(w: torch.Tensor, dim: int, group: int = 16) -> torch.Tensor:
    """Symmetric int4 (codes -7..7, scale = group absmax / 7) in groups of `group` along `dim`, by hand."""
    moved = w.movedim(dim, -1)
    g = moved.reshape(*moved.shape[:-1], -1, group)
    scale = g.abs().amax(-1, keepdim=True) / 7
    q = (torch.round(g / scale).clamp(-7, 7) * scale).reshape(moved.shape)
    return q.movedim(-1, dim)


def test_a_transposed_expert_bank_is_grouped_along_its_input_dimension():
    # GPT-OSS stores gate_up_proj [E, H, 2I] and down_proj [E, I, H] and multiplies x @ W: the input
    # dimension is -2. Groups along the last dimension (taken as [E, out, in]) ran across outputs.
    from transformers import GptOssConfig, GptOssForCausalLM

    import qdrift

    torch.manual_seed(0)
    cfg = GptOssConfig(vocab_size=64, hidden_size=64, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_local_experts=2,
                       num_experts_per_tok=1, layer_types=["full_attention"])
    model = GptOssForCausalLM(cfg).eval()
    bank = model.model.layers[0].mlp.experts
    for p in (bank.gate_up_proj, bank.down_proj):
        torch.nn.init.normal_(p, std=0.02)
    original = {name: getattr(bank, name).detach().clone() for name in ("gate_up_proj", "down_proj")}
    qdrift.quantize(model, "w4g16-a16-kv:16")
    for name, w in original.items():
        torch.testing.assert_close(getattr(bank, name).detach(), _int4_groups_along(w, -2), rtol=0, atol=1e-7)


def test_an_expert_bank_of_unknown_layout_is_refused():
    from qdrift.quant.select import EXPERTS, Target

    class OddExperts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_up_proj = torch.nn.Parameter(torch.zeros(2, 8, 8))
            self.down_proj = torch.nn.Parameter(torch.zeros(2, 8, 8))

    with pytest.raises(ValueError, match="neither .E, 2I, H. / .E, H, I. nor .E, H, 2I. / .E, I, H.*-skip:"):
        Target("model.layers.0.mlp.experts", OddExperts(), EXPERTS, True).in_features("gate_up_proj")
