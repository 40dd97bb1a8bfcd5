"""Feature uncertainty: why EAGLE's head reads the token *shifted* by one (EAGLE §3.1, Figs. 3, 4, 8).

The target samples t_{i+1} from a distribution; the feature f_{i+1} it computes next depends on
which token came out ("I am" vs "I always", EAGLE Fig. 3). A head that sees only f_i must predict
one f_{i+1} for all branches at once. Handing it e(t_{i+1}), the token that was actually taken,
removes that uncertainty. The paper's ablation trains the same head on four inputs at position i,
each predicting f_{i+1} (Figs. 4 and 8):

    variant      reads                fc input   paper (Vicuna-7B, MT-bench, T=0)
    token        e(t_{i+1})           H          1.5x, accuracy ~0.32
    feature      f_i                  H          1.9x, ~0.63
    unshifted    (e(t_i), f_i)        2H         0-alpha ~ feature only, better 1-alpha
    shifted      (e(t_{i+1}), f_i)    2H         2.8x, ~0.78 (EAGLE)

The unshifted head is EAGLE's head fed t_i instead of t_{i+1}: in training that is the ids rolled
right by one (`train.reading_ids`); in decoding its entry at position i reads (f_i, t_i), so the
root token (the target's last choice) is read one step later and a draft token one step after it
is drafted: `UnshiftedDrafter`. Its n-alpha (`train.chain_acceptance(token_shift=0)`) keeps the
labels and conditions of the shifted chain: chain step k at entry j predicts f_{j+1} from
(p_{k-1, j-1}, t_j) -- step 1 reads the root, which is always right, which is why its 1-alpha
beats the feature-only head's.

`branch_probe` and `error_by_entropy` measure the uncertainty directly on the target (EAGLE Fig. 3)
and show which heads it hurts. The experiment that trains the four heads is `ablation.py`.

    >>> [v.name for v in VARIANTS]
    ['token', 'feature', 'unshifted', 'shifted']
"""
from dataclasses import dataclass

import torch

from eagle_mini.draft import Drafter
from eagle_mini.methods import EAGLE2, resolve_tree
from eagle_mini.training.train import reading_ids


@dataclass(frozen=True)
class Variant:
    """One input of the ablation: the head's `input_mode` and which token it reads (EAGLE Fig. 4/8)."""
    name: str
    label: str
    input_mode: str
    token_shift: int   # 1: the head reads t_{i+1} at position i; 0: it reads t_i
    reads: str


VARIANTS = (
    Variant("token", "token only", "token", 1, "e(t_{i+1})"),
    Variant("feature", "feature only", "feature", 1, "f_i"),
    Variant("unshifted", "feature & unshifted token", "feature+token", 0, "(e(t_i), f_i)"),
    Variant("shifted", "feature & shifted token", "feature+token", 1, "(e(t_{i+1}), f_i)"),
)
BY_NAME = {v.name: v for v in VARIANTS}

# EAGLE §3.1 / reference §6: Vicuna-7B, MT-bench, greedy. The unshifted variant is reported only
# relative to the others (its 0-alpha ~ feature only's, its 1-alpha higher).
PAPER = {"target": "Vicuna-7B", "data": "MT-bench, T=0",
         "token": {"speedup": 1.5, "accuracy": 0.32},
         "feature": {"speedup": 1.9, "accuracy": 0.63},
         "unshifted": {"note": "0-alpha about feature only's, 1-alpha better"},
         "shifted": {"speedup": 2.8, "accuracy": 0.78}}


def training_rows(rows: list[dict], variant: Variant) -> list[dict]:
    """Featurized rows as the trainer must see them for `variant`: `eagle_loss` feeds the head
    `input_ids[:, 1:]`, so the unshifted variant gets its ids rolled right by one. Features and
    loss masks are shared, unchanged (the targets stay f_{i+1}). input_ids: [T] -> [T]."""
    if variant.token_shift == 1:
        return rows
    return [{**r, "input_ids": reading_ids(torch.as_tensor(r["input_ids"])[None], 0)[0]}
            for r in rows]


class UnshiftedDrafter(Drafter):
    """Drafting for a head that reads (f_i, t_i) at position i (the unshifted variant, EAGLE Fig. 8).

    `Drafter` feeds each node's own token with its parent's predicted feature: (f'_i, t_{i+1}).
    Here the entry at a node reads its parent's token instead, so a node's predicted feature does
    not depend on its own token and siblings share their children's distribution -- exactly the
    uncertainty the shifted token removes. The parent is the deepest ancestor among the head's
    draft entries (a mask row's last True column there; draft entries are stored depth by depth),
    or the root. `extend` reads t_i for the true features: the token before the first one it is
    given, so the drafter must know the prompt's first token.
    """

    def __init__(self, head, tree=EAGLE2, first_token: int = 0, **kw):
        self.first_token = int(first_token)
        super().__init__(head, tree, **kw)

    def reset(self):
        super().reset()
        self.last_token = self.first_token  # the token before the next extend's first feature

    @torch.no_grad()
    def extend(self, features, shifted_tokens) -> None:
        shifted = torch.as_tensor(shifted_tokens).view(-1).tolist()
        unshifted, self.last_token = [self.last_token] + shifted[:-1], shifted[-1]
        super().extend(features, unshifted)

    @torch.no_grad()
    def draft(self, root_token: int):
        self.root_token = int(root_token)
        self.draft_tokens = torch.zeros(0, dtype=torch.long)  # token of each draft entry, in order
        return super().draft(root_token)

    def _run(self, parent_features, tokens, depth: int, mask):
        n = tokens.shape[0]
        drafted = torch.as_tensor(mask)[:, :mask.shape[1] - n].bool().cpu()
        parent_tokens = torch.full((n,), self.root_token, dtype=torch.long)
        if drafted.shape[1]:
            has = drafted.any(1)
            deepest = drafted.shape[1] - 1 - drafted.flip(1).int().argmax(1)
            parent_tokens[has] = self.draft_tokens[deepest[has]]
        self.draft_tokens = torch.cat([self.draft_tokens, tokens.cpu()])
        return super()._run(parent_features, parent_tokens.to(tokens.device), depth, mask)


def make_drafter(head, variant: Variant, tree, prompt_ids: list[int]) -> Drafter:
    """The drafter `generate(..., drafter=)` needs for `variant` (greedy, a fresh one per prompt)."""
    shape = resolve_tree(tree)
    if variant.token_shift == 0:
        return UnshiftedDrafter(head, shape, first_token=prompt_ids[0])
    return Drafter(head, shape)


# --- measuring the uncertainty directly (EAGLE Fig. 3) -------------------------------------------
def _branch_mask(prefix: int, positions: torch.Tensor) -> torch.Tensor:
    """[prefix + m, prefix + m] bool: a causal prefix, then m branch entries; the one for position
    i sees prefix entries 0..limit_i (see callers) and itself. positions: [m] last visible entry."""
    m = positions.numel()
    mask = torch.zeros(prefix + m, prefix + m, dtype=torch.bool)
    mask[:prefix, :prefix] = torch.tril(torch.ones(prefix, prefix, dtype=torch.bool))
    cols = torch.arange(prefix)
    mask[prefix:, :prefix] = cols[None, :] <= positions[:, None]
    mask[prefix + torch.arange(m), prefix + torch.arange(m)] = True
    return mask


@torch.no_grad()
def branch_features(target, input_ids, positions, branch_tokens) -> torch.Tensor:
    """The target's feature f_{i+1} when t_{i+1} is each branch token, after the text's t_{<=i}.

    One forward: the text up to the last position, then every branch token at position i + 1
    seeing t_0..t_i and itself (a tree mask, as in verification, EAGLE §3.3).
    input_ids: [T]; positions: [k]; branch_tokens: [k, b] -> [k, b, H].
    """
    k, b = branch_tokens.shape
    prefix = int(positions.max()) + 1
    at = positions.repeat_interleave(b)
    ids = torch.cat([torch.as_tensor(input_ids)[:prefix], branch_tokens.reshape(-1)])
    pos = torch.cat([torch.arange(prefix), at + 1])
    step = target.forward(ids, target.new_cache(), positions=pos, tree_mask=_branch_mask(prefix, at))
    return step.features[prefix:].float().cpu().view(k, b, -1)


@torch.no_grad()
def predict_branches(head, variant: Variant, features, input_ids, positions, branch_tokens):
    """The head's f'_{i+1} at position i for each branch token t_{i+1}, teacher-forced.

    Entries 0..i-1 read the text; the branch entry at i reads (f_i, branch token) -- except that the
    feature-only head reads no token and the unshifted one reads t_i: both predict the same
    feature for every branch. features: [T, H]; input_ids: [T]; positions: [k];
    branch_tokens: [k, b] -> [k, b, H].
    """
    k, b = branch_tokens.shape
    read = reading_ids(torch.as_tensor(input_ids)[None], variant.token_shift)[0, 1:]  # [T-1]
    prefix = int(positions.max())
    at = positions.repeat_interleave(b)
    tok = branch_tokens.reshape(-1) if variant.token_shift else read[at]
    f = features.float()
    out = head(torch.cat([f[:prefix], f[at]])[None], torch.cat([read[:prefix], tok])[None],
               positions=torch.cat([torch.arange(prefix), at]),
               tree_mask=_branch_mask(prefix, at - 1))[0, prefix:]
    return out.view(k, b, -1)


def _draft_top1(head, predicted):
    """Target ids of the head's top-1 token from predicted features [..., H]."""
    return head.draft_to_target[head.draft_logits(predicted).argmax(-1)]


def _branch_summary(ctx: dict, steps: list, min_p: float) -> tuple[dict, torch.Tensor]:
    """(the median branch distance against the median step ||f_{j+1} - f_j|| and their ratio,
    every step distance)."""
    step_all = torch.cat(steps) if steps else torch.zeros(0)
    d = torch.tensor(ctx["branch_distance"])
    summary = {"contexts": len(d), "min_p": min_p,
               "median_branch_distance": d.median().item() if len(d) else float("nan"),
               "median_step_distance": step_all.median().item() if len(step_all) else float("nan")}
    summary["ratio"] = summary["median_branch_distance"] / summary["median_step_distance"]
    return summary, step_all


def _branch_heads(heads: dict, err: dict, top1: dict) -> dict:
    """Per head: its mean distance to the branches' features and how often its top-1 is each
    branch's token (both at once, and per branch)."""
    out = {}
    for name in heads:
        e, t = torch.tensor(err[name]).view(-1, 2), torch.tensor(top1[name]).view(-1, 2)
        out[name] = {"mean_error": e.mean().item() if len(e) else float("nan"),
                     "both_branches_top1": t.all(1).float().mean().item() if len(t) else float("nan"),
                     "top1": t.float().mean().item() if len(t) else float("nan"),
                     "errors": e.tolist(), "top1_per_branch": t.tolist()}
    return out


@torch.no_grad()
def branch_probe(target, heads: dict, rows, min_p: float = 0.2, max_contexts: int = 300,
                 per_row: int = 30, examples: int = 6) -> dict:
    """Contexts where the target has two likely next tokens (top-2 probability >= min_p, on assistant
    tokens): how far apart the two branches' next features are, against the typical step
    ||f_{j+1} - f_j||, and how close each head (`heads`: variant name -> head) gets to each branch.

    A head blind to the branch predicts one feature for both: by the triangle inequality its two
    errors add up to at least the branches' distance.
    """
    lm = target.model.lm_head.weight.detach().float().cpu()
    ctx = {"p": [], "tokens": [], "branch_distance": [], "step_distance": [], "row": [],
           "position": []}
    err = {v: [] for v in heads}
    top1 = {v: [] for v in heads}
    steps, shown = [], []
    for r, row in enumerate(rows):
        if len(ctx["p"]) >= max_contexts:
            break
        f, ids = row["features"].float(), torch.as_tensor(row["input_ids"])
        assistant = torch.as_tensor(row["loss_mask"])[1:].bool()
        steps.append((f[1:] - f[:-1]).norm(dim=-1)[assistant])
        top = (f[:-1] @ lm.T).softmax(-1).topk(2)
        where = ((top.values[:, 1] >= min_p) & assistant).nonzero().view(-1)
        if where.numel() == 0:
            continue
        take = min(per_row, max_contexts - len(ctx["p"]), where.numel())
        pos = where[torch.linspace(0, where.numel() - 1, take).round().long()]
        tokens = top.indices[pos]
        fb = branch_features(target, ids, pos, tokens)                       # [k, 2, H]
        ctx["p"] += top.values[pos].tolist()
        ctx["tokens"] += tokens.tolist()
        ctx["branch_distance"] += (fb[:, 0] - fb[:, 1]).norm(dim=-1).tolist()
        ctx["step_distance"] += (fb - f[pos][:, None]).norm(dim=-1).mean(1).tolist()
        ctx["row"] += [r] * take
        ctx["position"] += pos.tolist()
        truth = (fb @ lm.T).argmax(-1)                                         # [k, 2]
        for name, head in heads.items():
            pred = predict_branches(head, BY_NAME[name], f, ids, pos, tokens)
            err[name] += (pred - fb).norm(dim=-1).tolist()
            top1[name] += (_draft_top1(head, pred) == truth).tolist()
        for j in range(min(take, examples - len(shown))):
            i = int(pos[j])
            shown.append({"context": target.decode(ids[max(0, i - 12):i + 1].tolist()),
                          "branches": [target.decode([int(t)]) for t in tokens[j]],
                          "p": top.values[i].tolist(),
                          "distance": ctx["branch_distance"][-take + j]})
    summary, step_all = _branch_summary(ctx, steps, min_p)
    sample = step_all[torch.linspace(0, len(step_all) - 1, min(len(step_all), 2000)).long()] \
        if len(step_all) else step_all
    return {"summary": summary, "contexts": ctx, "heads": _branch_heads(heads, err, top1),
            "examples": shown, "step_distance_sample": sample.tolist()}


@torch.no_grad()
def error_by_entropy(target, heads: dict, rows, bins: int = 6, max_tokens: int = 20_000) -> dict:
    """Pass-0 regression error ||f'_{i+1} - f_{i+1}|| / ||f_{i+1}|| and top-1 of each head, binned
    by the target's entropy at step i (nats, quantile bins), on assistant positions of `rows`.

    High entropy = several likely t_{i+1} = an uncertain f_{i+1} for heads that cannot see it.
    """
    lm = target.model.lm_head.weight.detach().float().cpu()
    ent, errs, hits, used = [], {v: [] for v in heads}, {v: [] for v in heads}, 0
    for row in rows:
        if used >= max_tokens:
            break
        f, ids = row["features"].float(), torch.as_tensor(row["input_ids"])[None]
        keep = torch.as_tensor(row["loss_mask"])[1:].bool()
        logp = (f @ lm.T).log_softmax(-1)
        ent.append(-(logp[:-1].exp() * logp[:-1]).sum(-1)[keep])
        truth = logp[1:].argmax(-1)[keep]
        for name, head in heads.items():
            read = reading_ids(ids, BY_NAME[name].token_shift)[:, 1:]
            pred = head(f[None, :-1], read)[0][keep]
            errs[name].append((pred - f[1:][keep]).norm(dim=-1) / f[1:][keep].norm(dim=-1))
            hits[name].append((_draft_top1(head, pred) == truth).float())
        used += len(f)
    ent = torch.cat(ent)
    edges = torch.quantile(ent, torch.linspace(0, 1, bins + 1))
    which = torch.bucketize(ent, edges[1:-1])
    out = {"edges": edges.tolist(), "mean_entropy": [], "count": [], "tokens": int(len(ent)),
           "rel_error": {v: [] for v in heads}, "top1": {v: [] for v in heads}}
    for b in range(bins):
        sel = which == b
        out["count"].append(int(sel.sum()))
        out["mean_entropy"].append(ent[sel].mean().item())
        for name in heads:
            out["rel_error"][name].append(torch.cat(errs[name])[sel].mean().item())
            out["top1"][name].append(torch.cat(hits[name])[sel].mean().item())
    return out
