import torch


def prompt(n: int = 16, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (batch, n), generator=torch.Generator().manual_seed(seed))
