"""Intervals for pooled rates, by bootstrap over the units that are independent.

A draft head's top-1, n-alpha and tau are *pooled ratios*: all accepted over all tried, all tokens
over all cycles. The tokens of one conversation, and the cycles of one prompt, are correlated, so
a binomial error over tokens is too narrow. The unit that is independent is the conversation (for
teacher-forced rates) or the prompt (for tau): we resample those, with replacement, and recompute
the pooled ratio each time (Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13).

Several training seeds of one configuration are pooled by the *mean over seeds* of each seed's
ratio. Two configurations measured on the same units are compared *paired*: each resample draws
one set of units and applies it to both arms and to every seed, so what the units share cancels.

    >>> a = Arm([[[3, 4], [1, 4]]])            # one seed, two units, (numerator, denominator)
    >>> a.estimate()
    0.5
    >>> b = Arm([[[4, 4], [2, 4]]])
    >>> d = paired_difference(a, b, resamples=200, seed=0)
    >>> round(d["estimate"], 3), d["low"] >= 0.0
    (0.25, True)
"""
from dataclasses import dataclass

import torch

RESAMPLES = 4000
LEVEL = 0.95


@dataclass
class Arm:
    """Counts of one configuration: `counts[seed][unit] = (numerator, denominator)`.

    Every seed must hold the same units in the same order (the same conversations or prompts)."""
    counts: list

    def __post_init__(self):
        t = torch.as_tensor(self.counts, dtype=torch.float64)
        if t.dim() != 3 or t.shape[-1] != 2 or t.shape[0] == 0 or t.shape[1] == 0:
            raise ValueError("counts must be [seeds][units][2] with at least one seed and unit")
        self.num, self.den = t[..., 0], t[..., 1]

    @property
    def units(self) -> int:
        return self.num.shape[1]

    def per_seed(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        """Pooled ratio of each seed: [seeds], or [seeds, resamples] for unit indices [B, units]."""
        if idx is None:
            return self.num.sum(-1) / self.den.sum(-1)
        return self.num[:, idx].sum(-1) / self.den[:, idx].sum(-1)

    def estimate(self) -> float:
        """Mean over seeds of each seed's pooled ratio."""
        return float(self.per_seed().mean())


def resample_indices(units: int, resamples: int = RESAMPLES, seed: int = 0) -> torch.Tensor:
    """[resamples, units] indices drawn with replacement, reproducibly."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(units, (resamples, units), generator=g)


def interval_from_draws(estimate: float, draws: torch.Tensor, level: float) -> dict:
    """A percentile interval at `level` from bootstrap `draws` (non-finite draws dropped)."""
    draws = draws[torch.isfinite(draws)]
    q = torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=draws.dtype)
    low, high = torch.quantile(draws, q).tolist() if draws.numel() else (float("nan"),) * 2
    return {"estimate": estimate, "low": low, "high": high, "level": level,
            "resamples": int(draws.numel())}


def interval(arm: Arm, resamples: int = RESAMPLES, seed: int = 0, level: float = LEVEL) -> dict:
    """Percentile bootstrap interval of `arm.estimate()`, resampling units."""
    idx = resample_indices(arm.units, resamples, seed)
    return interval_from_draws(arm.estimate(), arm.per_seed(idx).mean(0), level)


def paired_difference(a: Arm, b: Arm, resamples: int = RESAMPLES, seed: int = 0,
                      level: float = LEVEL) -> dict:
    """Interval of b - a (each the mean over its seeds), with the units resampled jointly."""
    if a.units != b.units:
        raise ValueError(f"paired arms need the same units, got {a.units} and {b.units}")
    idx = resample_indices(a.units, resamples, seed)
    draws = b.per_seed(idx).mean(0) - a.per_seed(idx).mean(0)
    return interval_from_draws(b.estimate() - a.estimate(), draws, level)


def excludes_zero(iv: dict) -> bool:
    """The interval lies wholly above 0 (b beats a)."""
    return iv["low"] > 0


def about_equal(iv: dict, margin: float) -> bool:
    """The interval holds 0 and lies within +-margin."""
    return iv["low"] <= 0 <= iv["high"] and -margin <= iv["low"] and iv["high"] <= margin
