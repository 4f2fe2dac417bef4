"""Speculative decoding in the serving simulation: ``k`` drafted tokens per decoding sequence, verified by the
target model in one step of ``k + 1`` query tokens per sequence (priced from the IR as any step of that
composition), each draft accepted with probability ``alpha`` independently until the first rejection, plus the
target's own token after the last accepted one: expected tokens per verify step
``E = (1 - alpha^(k+1)) / (1 - alpha)`` (``k + 1`` at ``alpha = 1``; Leviathan et al. 2023, eq. 1).

The simulation is deterministic: each sequence keeps a credit, adds ``E`` every verify step and takes the whole
tokens of it (so after ``m`` verify steps it has produced ``floor(m E)`` tokens; never more than ``k + 1`` in a
step, nor more than it still has to produce). Drafting costs ``draft`` x ``k`` target decode steps of the
drafting sequences (``draft`` 0: n-gram / prompt lookup, whose drafts cost nothing on the GPU; a draft model of a
tenth of the target's bytes: about 0.1; EAGLE-style heads: about one layer's share). As vLLM V1 schedules it
(``vllm/v1/core/sched/scheduler.py``: a running request's ``spec_token_ids`` are scheduled with its token), a
decoding sequence's KV blocks are allocated for its ``k + 1`` tokens; a prompt's chunks are never speculated.
The inter-token latency counts a step's accepted tokens as one arrival (as a streamed chunk), TPOT per token.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Tokens a verify step may draft at most (a sanity bound on --spec-tokens).
MOST_TOKENS = 64


@dataclass(frozen=True)
class Speculation:
    """``tokens`` (k) drafted per step, ``acceptance`` (alpha) in [0, 1], ``draft`` (a drafted token's cost in
    target decode steps, >= 0)."""

    tokens: int
    acceptance: float
    draft: float = 0.0

    def __post_init__(self):
        from .simload import LoadError

        if not isinstance(self.tokens, int) or isinstance(self.tokens, bool) or not 1 <= self.tokens <= MOST_TOKENS:
            raise LoadError(f"--spec-tokens must be a whole number in [1, {MOST_TOKENS}], got {self.tokens!r}")
        if not 0 <= self.acceptance <= 1:
            raise LoadError(f"--spec-acceptance must be in [0, 1], got {self.acceptance!r}")
        if not 0 <= self.draft < float("inf"):
            raise LoadError(f"--spec-draft-cost must be a finite number >= 0, got {self.draft!r}")

    @property
    def expected(self) -> float:
        """Expected tokens per verify step, ``(1 - alpha^(k+1)) / (1 - alpha)``."""
        a, k = self.acceptance, self.tokens
        return float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)

    def take(self, credit: np.ndarray, most: np.ndarray) -> np.ndarray:
        """Tokens produced this step by sequences of ``credit`` (updated in place), at most ``most`` each."""
        credit += self.expected
        got = np.floor(credit + 1e-9).astype(np.int64)
        got = np.clip(got, 1, np.minimum(self.tokens + 1, np.maximum(most, 1)))
        credit -= got
        np.clip(credit, 0.0, 1 - 1e-9, out=credit)  # (a capped step's surplus is lost, not carried)
        return got
