import pytest
import torch

from qdrift.tiny import architectures, tiny_model

ARCHS = architectures()


@pytest.fixture
def llama():
    return tiny_model("llama")


def prompt(n: int = 12, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (batch, n), generator=torch.Generator().manual_seed(seed))
