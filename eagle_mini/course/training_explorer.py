"""Notebook 03's training explorer: what a draft head predicts at any position of a held-out
conversation, at any checkpoint of the learner's run, at any step of a chain (EAGLE §3.1, §3.2 and
§4.3's n-alpha).

At position i the head reads the feature f_i and the shifted token t_{i+1} and predicts f'_{i+1};
its draft for t_{i+2} is the argmax of lm_head(f'_{i+1}) over its draft vocabulary, and the target
accepts it (greedy) when it equals the target's argmax from the true f_{i+1}. Training pulls
f'_{i+1} towards f_{i+1} on two scales at once (`train.eagle_loss`): SmoothL1 on the feature and
`w_cls` times the soft cross-entropy against softmax(lm_head(f_{i+1})). At step n of a chain the
head reads its own predictions for the n positions before i (the chain a decoder drafts from
position i - n), and its errors compound.

Everything comes from the package's own code on the learner's run: `chains.chain_outcomes` makes
the chains (`unrolled_predictions`) and says, per position and step, whether the draft equals the
target's choice and whether the chain got that far, so the accepted / tried share over the
conversation is `chain_acceptance`'s n-alpha on it; `trace` adds both loss parts per position, as
`eagle_loss` computes them with the noise off.

    t = trace(head, row)
    view(head, row, t, position=i, step=0)["outcome"]   # 'accepted', 'rejected', ...

Left out: trees (notebook 04 drafts several children per step), the training noise, and heads
that read more than the last feature (EAGLE-3, notebook 08).
"""
from copy import deepcopy

import torch
import torch.nn.functional as F

from eagle_mini.course.explorer import Explorer
from eagle_mini.errors import EagleMiniError
from eagle_mini.training.chains import chain_outcomes
from eagle_mini.training.train import TrainConfig

OUTCOMES = {"accepted": "tab:green", "rejected": "tab:red", "not reached": "0.75"}


def snapshot(head, target):
    """A frozen copy of `head`'s trained weights, attached to `target` (its embedding and lm_head
    stay the target's, shared, not copied): a checkpoint kept in memory while `head` trains on."""
    copy = deepcopy(head, memo={id(head._shared): {}})   # the target's tensors stay out of the copy
    return copy.attach(target).eval().requires_grad_(False)


@torch.no_grad()
def trace(head, row: dict, steps: int = 4) -> dict:
    """One featurized conversation (`input_ids` [T], `features` [T, H], `loss_mask` [T]) read by
    `head`, per position i < T-1: `chain_outcomes`' `preds` [steps, T-1, H], `draft`, `correct`
    and `tried` [steps, T-1], `target_next` [T-1]; `counted` [T-1] (t_{i+1} is an assistant token);
    `reg` and `cls` [steps, T-1], the loss parts at each position and step."""
    ids, f = torch.as_tensor(row["input_ids"])[None], row["features"].float()[None]
    mask = torch.as_tensor(row["loss_mask"])[None]
    out = chain_outcomes(head, f, ids, mask, steps)
    f_out = f[0, 1:]
    target_p = head.draft_logits(f_out).float().softmax(-1)   # the target's, over the draft vocabulary
    preds = torch.stack(out["preds"])
    reg = F.smooth_l1_loss(preds, f_out.expand_as(preds), reduction="none").mean(-1)
    cls = torch.stack([-(target_p * head.draft_logits(p).float().log_softmax(-1)).sum(-1) for p in preds])
    return {**out, "preds": preds, "counted": mask[0, 1:].bool(), "reg": reg, "cls": cls}


def outcomes(t: dict, step: int) -> list[str]:
    """Per position at chain step `step`: 'accepted', 'rejected', 'not reached' (an earlier step
    of its chain was rejected, or the text left the target's choice there) or 'not counted'."""
    return ["not counted" if not counted else "not reached" if not tried else
            "accepted" if correct else "rejected"
            for counted, tried, correct in zip(t["counted"].tolist(), t["tried"][step].tolist(),
                                               t["correct"][step].tolist())]


@torch.no_grad()
def view(head, row: dict, t: dict, position: int, step: int, top: int = 5,
         w_cls: float = TrainConfig.w_cls) -> dict:
    """What the explorer shows at `position` and chain `step`: the tokens read and the text's next
    one, the draft's `top` tokens (target ids, probability over the draft vocabulary) and the
    target's (over its whole vocabulary), `bars` (each of those tokens: target's and draft's
    probability, 0 outside the draft vocabulary), the outcome, the loss parts there, and over the
    conversation at this step: accepted, tried and the mean loss parts over counted positions."""
    n, steps = t["reg"].shape[1], t["reg"].shape[0]
    if not 0 <= position < n:
        raise EagleMiniError(f"position must be in 0..{n - 1}, got {position}")
    if not 0 <= step < steps:
        raise EagleMiniError(f"step must be in 0..{steps - 1} (the chain's steps traced), got {step}")
    ids = torch.as_tensor(row["input_ids"])
    draft_p = head.draft_logits(t["preds"][step, position]).float().softmax(-1)
    target_p = (row["features"][position + 1].float() @ head._shared["target_lm_head"].float().T).softmax(-1)
    d = draft_p.topk(min(top, draft_p.numel()))
    g = target_p.topk(top)
    on_draft = dict(zip(head.draft_to_target.tolist(), draft_p.tolist()))
    tokens = dict.fromkeys(g.indices.tolist() + head.draft_to_target[d.indices].tolist())
    counted, tried = t["counted"], t["tried"][step]
    accepted = int((t["correct"][step] & tried).sum())
    return {"position": position, "step": step, "shifted_token": int(ids[position + 1]),
            "text_next": int(ids[position + 2]) if position + 2 < len(ids) else None,
            "chain_from": position - step,
            "draft_top": list(zip(head.draft_to_target[d.indices].tolist(), d.values.tolist())),
            "target_top": list(zip(g.indices.tolist(), g.values.tolist())),
            "bars": [(i, float(target_p[i]), on_draft.get(i, 0.0)) for i in tokens],
            "draft": int(t["draft"][step, position]), "target": int(t["target_next"][position]),
            "target_in_draft_vocab": bool((head.draft_to_target == t["target_next"][position]).any()),
            "outcome": outcomes(t, step)[position],
            "reg": float(t["reg"][step, position]), "cls": float(t["cls"][step, position]),
            "loss": float(t["reg"][step, position] + w_cls * t["cls"][step, position]), "w_cls": w_cls,
            "accepted": accepted, "tried": int(tried.sum()),
            "alpha": accepted / int(tried.sum()) if tried.any() else float("nan"),
            "mean_reg": float(t["reg"][step][counted].mean()), "mean_cls": float(t["cls"][step][counted].mean())}


def draw(t: dict, s: dict, label: str, text, axes):
    """Left: SmoothL1 at every position at this step, coloured by outcome, the chosen position
    marked. Right: the draft's and the target's top tokens there."""
    left, right = axes
    kinds = outcomes(t, s["step"])
    for kind, color in OUTCOMES.items():
        at = [i for i, k in enumerate(kinds) if k == kind]
        left.scatter(at, t["reg"][s["step"], at].tolist(), s=9, color=color, label=kind)
    left.axvline(s["position"], color="black", lw=1, ls="--")
    left.set(xlabel="position i (assistant positions only)", ylabel=r"SmoothL1($\hat f_{i+1}$, $f_{i+1}$)",
             title=f"head {label}, chain step {s['step']}: {s['accepted']} of {s['tried']} accepted")
    left.legend(fontsize=7, loc="upper right", markerscale=2)
    tokens, target, draft = zip(*s["bars"])
    y = torch.arange(len(tokens)).float()
    right.barh(y - 0.2, target, 0.4, color="0.35", label=r"target, $p(t_{i+2})$ from $f_{i+1}$")
    right.barh(y + 0.2, draft, 0.4, color="tab:blue", label=r"draft, from $\hat f_{i+1}$")
    right.set_yticks(y.tolist(), [text(i) for i in tokens], fontsize=8)
    right.invert_yaxis()
    right.set(xlim=(0, 1), xlabel="probability (both sides' top tokens)", title=f"position {s['position']}")
    right.legend(fontsize=7, loc="lower right")
    return axes


def code(text: str) -> str:
    """`text` as a Markdown code span that holds backticks, stars and underscores as they are."""
    return f"`` {text} ``"


class TrainingExplorer(Explorer):
    """Notebook 03's controls: the position i (the first control), the head (`heads`: a name ->
    head, e.g. the learner's checkpoints and the shipped head) and the chain step n; the loss
    parts and outcomes along `row`, a held-out conversation, and what the head drafts at i."""

    def __init__(self, heads: dict, row: dict, text=str, steps: int = 4, position: int | None = None,
                 head: str | None = None, w_cls: float = TrainConfig.w_cls):
        import ipywidgets as w
        self.heads, self.row, self.text, self.steps, self.w_cls = heads, row, text, steps, w_cls
        self._traces = {}
        counted = torch.as_tensor(row["loss_mask"])[1:].nonzero().flatten().tolist()   # position i: t_{i+1}
        if not counted:
            raise EagleMiniError("the conversation has no assistant position to explore")
        style = {"description_width": "120px"}
        self.position = w.IntSlider(value=position if position is not None else counted[len(counted) // 4],
                                    min=counted[0], max=counted[-1], description="position i", style=style,
                                    layout=w.Layout(width="620px"))
        self.head = w.ToggleButtons(options=list(heads), value=head or next(iter(heads)), description="head",
                                    style=style)
        self.step = w.IntSlider(value=0, min=0, max=steps - 1, description="chain step n", style=style,
                                layout=w.Layout(width="420px"))
        self.wire(self.position, self.head, self.step)

    def trace(self, name: str) -> dict:
        if name not in self._traces:
            self._traces[name] = trace(self.heads[name], self.row, self.steps)
        return self._traces[name]

    def state(self) -> dict:
        name = self.head.value
        return {"head": name, **view(self.heads[name], self.row, self.trace(name), self.position.value,
                                     self.step.value, w_cls=self.w_cls)}

    def show(self):
        import matplotlib.pyplot as plt
        from IPython.display import Markdown, clear_output, display
        s, tok = self.state(), self.text
        ids = torch.as_tensor(self.row["input_ids"]).tolist()
        i, n = s["position"], s["step"]
        context = code(" ".join(tok(x) for x in ids[max(0, i - 8):i + 2]))
        reads = (f"reads $f_{{{i}}}$ and $t_{{{i + 1}}}$ = {code(tok(s['shifted_token']))}" if n == 0 else
                 f"reads the true features up to $f_{{{s['chain_from']}}}$, then its own {n} predicted one(s): "
                 f"the chain drafted from position {s['chain_from']}, at its step {n}")
        why = {"accepted": "the target accepts it", "rejected": "the target rejects it",
               "not reached": "no chain gets here: an earlier step was rejected, or the text left the "
                              "target's choice",
               "not counted": "not an assistant position (not in the loss)"}[s["outcome"]]
        vocab = "" if s["target_in_draft_vocab"] else " (outside the draft vocabulary: it can never be drafted)"
        with self.output:
            clear_output(wait=True)
            fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), width_ratios=(3, 2), layout="constrained")
            draw(self.trace(s["head"]), s, s["head"], tok, axes)
            display(fig)
            plt.close(fig)
            display(Markdown(
                f"**{s['head']}, position {i}, chain step {n}**: text up to $t_{{{i + 1}}}$: … {context}. "
                f"The head {reads}. Draft {code(tok(s['draft']))}, the target's choice "
                f"{code(tok(s['target']))}{vocab}, the text's next token "
                f"{code(tok(s['text_next'])) if s['text_next'] is not None else '(the end)'}: "
                f"**{s['outcome']}**, {why}.\n\n"
                f"Loss here: SmoothL1 {s['reg']:.3f} + {s['w_cls']:g} × soft CE {s['cls']:.2f} = "
                f"**{s['loss']:.3f}**. Over this conversation at step {n}: mean SmoothL1 {s['mean_reg']:.3f}, "
                f"mean soft CE {s['mean_cls']:.2f}; {s['accepted']} of {s['tried']} drafts accepted, "
                f"{n}-alpha **{s['alpha']:.3f}**."))
