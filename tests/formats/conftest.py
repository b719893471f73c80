import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    """Every test draws the same data on every run (QDRIFT_TEST_SEED picks another draw)."""
    torch.manual_seed(int(os.environ.get("QDRIFT_TEST_SEED", "0")))
