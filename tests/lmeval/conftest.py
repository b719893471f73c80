"""Shared, cheap fixtures: a tiny random llama with its byte tokenizer, and the embedded organism."""

import os

import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local JSON/CSV only: never reach for the hub


@pytest.fixture(scope="session")
def tiny():
    from qdrift.tiny import tiny_model, tiny_tokenizer

    return tiny_model("llama"), tiny_tokenizer()


@pytest.fixture(scope="session")
def organism():
    from qdrift.organism import load_organism

    return load_organism()
