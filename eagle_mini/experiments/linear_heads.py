"""The ablation's four inputs (`uncertainty.VARIANTS`) with the head made *linear* and fitted in
closed form: the signal of EAGLE's ablation (EAGLE §3.1, Figs. 4 and 8) in seconds, where four
one-layer heads trained by gradient descent need hours to rise above noise (`ablation.py`).

A linear head maps its input x_i to a predicted next feature f'_(i+1) = W x_i + b, where x_i is
the variant's reading at position i: e(t_(i+1)), f_i, (f_i, e(t_i)) or (f_i, e(t_(i+1))). W and b
are the least-squares fit over the training rows with a small ridge, the solution of
(X^T X + lambda I) W = X^T Y (X with a column of ones for b, Y the true f_(i+1)). Its draft is the
frozen lm_head's argmax of f'_(i+1), and **top-1** (the papers' 0-alpha) counts it equal to the
target's own argmax of the true f_(i+1), at the positions whose token t_(i+2) is the assistant's
(the loss mask). Counts are kept per validation conversation, so `measure.intervals` can pool and
resample them by conversation.

What it leaves out: the head's decoder layer (its attention over earlier positions), the chain
(n-alpha for n > 0) and decoding. The ablation proper trains the real head on the same inputs.

    >>> g = torch.Generator().manual_seed(0)
    >>> embed = torch.randn(50, 64, generator=g)
    >>> rows = [{"features": embed[t], "input_ids": t, "loss_mask": torch.ones(40)}
    ...         for t in torch.randint(50, (6, 40), generator=g)]   # f_j = e(t_j): a toy target
    >>> r = linear_ablation(rows[:4], rows[4:], embed, embed)
    >>> r["shifted"]["top1"]["estimate"], r["feature"]["top1"]["estimate"] < 0.5
    (1.0, True)
"""
import torch

from eagle_mini.experiments.uncertainty import VARIANTS, Variant
from eagle_mini.measure.intervals import Arm, interval

RIDGE = 1.0   # lambda: keeps the normal equations well conditioned; small against X^T X


def readings(row: dict, variant: Variant, embed: torch.Tensor) -> tuple:
    """(X [T-2, d + 1], Y [T-2, H], mask [T-2]) of one row: the variant's input at positions
    0..T-3 with a column of ones, the true next features, and whether t_(i+2) is the assistant's."""
    f, t = row["features"].float(), torch.as_tensor(row["input_ids"])
    i = torch.arange(len(t) - 2)
    parts = {"token": [embed[t[i + 1]]], "feature": [f[i]]}.get(variant.input_mode)
    if parts is None:   # feature+token: the shifted reads t_(i+1), the unshifted t_i
        parts = [f[i], embed[t[i + variant.token_shift]]]
    x = torch.cat([p.float() for p in parts] + [torch.ones(len(i), 1)], dim=1)
    return x, f[i + 1], torch.as_tensor(row["loss_mask"])[i + 2].bool()


def fit(rows: list[dict], variant: Variant, embed: torch.Tensor, ridge: float = RIDGE) -> torch.Tensor:
    """The ridge least-squares W [d + 1, H] (its last row is b) over every position of `rows`."""
    xs, ys = zip(*(readings(r, variant, embed)[:2] for r in rows))
    x, y = torch.cat(xs).double(), torch.cat(ys).double()
    return torch.linalg.solve(x.T @ x + ridge * torch.eye(x.shape[1], dtype=x.dtype), x.T @ y).float()


def top1_counts(rows: list[dict], variant: Variant, embed: torch.Tensor, lm_head: torch.Tensor,
                w: torch.Tensor) -> list[list[int]]:
    """[hits, positions] per row: the linear head's lm_head argmax against the target's."""
    out = []
    for r in rows:
        x, y, mask = readings(r, variant, embed)
        hit = (x @ w @ lm_head.float().T).argmax(-1) == (y @ lm_head.float().T).argmax(-1)
        out.append([int(hit[mask].sum()), int(mask.sum())])
    return out


def linear_ablation(train_rows: list[dict], val_rows: list[dict], embed: torch.Tensor,
                    lm_head: torch.Tensor, ridge: float = RIDGE) -> dict:
    """Per variant: its per-conversation counts (an `Arm` of one seed) and its top-1 interval."""
    embed = embed.detach().float()
    out = {}
    for v in VARIANTS:
        arm = Arm([top1_counts(val_rows, v, embed, lm_head.detach(), fit(train_rows, v, embed, ridge))])
        out[v.name] = {"label": v.label, "reads": v.reads, "arm": arm, "top1": interval(arm)}
    return out
