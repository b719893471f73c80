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
