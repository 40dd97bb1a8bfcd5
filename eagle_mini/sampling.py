"""Turning logits into the distribution we sample from: temperature, top-k, top-p.

Vanilla sampling and EAGLE's lossless verification (EAGLE §3.3, appendix on speculative sampling)
must use the *same* warped target distribution p, otherwise "lossless" would compare against the
wrong reference. So both call `warp` here; nothing else in the package touches temperature.
Order as in Hugging Face `generate`: temperature, then top-k, then top-p.

    >>> warp(torch.tensor([[2.0, 1.0, 0.0]]), temperature=0).tolist()
    [[1.0, 0.0, 0.0]]
"""
from dataclasses import dataclass

import torch

from eagle_mini.errors import EagleMiniError


@dataclass(frozen=True)
class SamplingConfig:
    """temperature 0 means greedy; top_p `1.0` and top_k 0 mean "off"."""
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self):
        if self.temperature < 0:
            raise EagleMiniError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise EagleMiniError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise EagleMiniError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def warp(logits: torch.Tensor, temperature: float = 0.0, top_p: float = 1.0,
         top_k: int = 0) -> torch.Tensor:
    """logits: [..., vocab] -> probabilities [..., vocab]; greedy gives a one-hot on the argmax."""
    logits = logits.float()
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = logits / temperature
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.softmax(-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(-1, descending=True)
        # drop a token when the mass strictly before it already reaches top_p (keeps >= 1 token)
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def make_generator(seed: int | None, device) -> torch.Generator | None:
    """The one random generator of a generation, on the target's device: CUDA's multinomial and
    rand refuse a CPU generator. None (seed None) means torch's global generator of that device."""
    if seed is None:
        return None
    return torch.Generator(device=torch.device(device)).manual_seed(seed)


def uniform(generator: torch.Generator | None = None) -> float:
    """One draw from U[0, 1), made on the generator's own device."""
    device = generator.device if generator is not None else None
    return float(torch.rand((), generator=generator, device=device))


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """Draw one token id from probs: [vocab]."""
    return int(torch.multinomial(probs, 1, generator=generator))


def next_token(logits: torch.Tensor, cfg: SamplingConfig, generator=None) -> int:
    """The vanilla decoder's choice from logits: [vocab]."""
    if cfg.greedy:
        return int(logits.argmax())
    return sample(warp(logits, cfg.temperature, cfg.top_p, cfg.top_k), generator)
