"""One assistant turn as a policy produced it: what the episode runner reads from any backend.

Kept apart from the transformers backend so an endpoint policy can use it without importing torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Generation:
    """One assistant turn as the model produced it."""

    text: str  # raw assistant text, including any prefilled call opening
    token_ids: list[int]
    logprob: float  # sum over generated tokens
    tokens_in: int  # tokens fed to the model for this turn (the conversation's new suffix)
    tokens_out: int
    stop_reason: str
    error: str | None = None
