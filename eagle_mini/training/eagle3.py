"""Training an EAGLE-3 head: the training-time test, token loss only (EAGLE-3 §3; reference §5).

EAGLE-1 teaches the head to predict the target's next *feature* from true features, with noise to
make it robust to its own errors. EAGLE-3 drops the feature loss and trains drafting as decoding
runs it: step 0 reads the target's fused layers, step k reads the head's own output of step k-1,
and every step is scored on the *token* it predicts,

    L = sum_{k < K} `0.8`^k * CE_k,    CE_k = softCE(p_target | draft vocab, p_draft at step k)

averaged over assistant positions whose chain starts inside the sequence. The label of every step
at position j is the target's next-token distribution there, restricted to the draft vocabulary
and renormalized; a position counts only when the target's argmax over the *full* vocabulary has
a draft id (the authors' mask `loss_mask * t2d[argmax]`). top-1 is counted the same way but over
`loss_mask` alone, so a token outside the draft vocabulary is a miss: full-vocabulary top-1.

The chains are those of `train.unrolled_predictions`: step k at position j sits where decoding
puts it (the k-th draft of a chain rooted at j - k) and attends to what decoding's cache would
hold, so training and drafting see the same positions and masks.

Where this departs from the authors' training code (`eagle/traineagle3/`), each kept as it is:
no head was retrained to measure what the authors' choice would change in tau.

- **Gradient clipping.** `train_head` clips every gradient *by value* at `0.5`, as EAGLE-1
  trains; the authors' EAGLE-3 recipe clips the *global norm* at `0.5` (DeepSpeed's
  `gradient_clipping`). Kept: one optimizer step for both kinds of head, and the shipped heads
  were trained so.
- **Loss mask.** A position counts when the token it reads, t_{j+1}, is an assistant token
  (`chains.loss_mask_positions`), so the first label is the reply's *second* token: the first
  comes from the target's own prefill, and decoding never drafts it. The authors' mask is made
  from hand-set token offsets of the Llama-3 template and applied to the position unshifted; as
  read here it starts on the last header token, which gives the same first label in every turn,
  and at the end of every turn but the last it stops one label before ours (the reply's closing
  token is its last label, the token after it ours). Kept: ours is the template's own assistant
  spans, for any chat template.
- **Averaging.** Each step's CE is divided by the positions that count (assistant positions
  whose chain starts in the sequence); the authors take the mean over *all* positions, prompt
  and padding included, so their loss shrinks with a batch's share of reply tokens and weighs
  reply-heavy batches more. Kept: a batch's loss does not depend on how much prompt it carries.
"""
import torch

from eagle_mini.training.chains import loss_mask_positions, unrolled_predictions


def ttt_loss(head, layers, features, input_ids, loss_mask, steps: int = 7, decay: float = 0.8):
    """-> (loss, parts). layers: [b, T, 3H] the head's inputs (`eagle3.aux_layers`); features:
    [b, T, H] the target's last features (the labels' source); input_ids, loss_mask: [b, T].

    Parts: `loss`, `ce` and `top1` of every step (top1[0] is top-1 = 0-alpha, teacher-forced),
    `tokens` (assistant positions). Rows run one at a time (each its own unrolled cache).
    """
    inner = getattr(head, "module", head)   # under DDP the head is wrapped; call the wrapper
    target_lm = inner._shared["target_lm_head"].float()   # once: a copy on a bf16 target
    d2t = inner.draft_to_target
    t2d = inner.t2d
    weight = loss_mask_positions(loss_mask)
    sums = [[0.0, 0.0, 0.0] for _ in range(steps)]   # per step: CE sum, correct, counted
    ce_terms = [[] for _ in range(steps)]
    for b in range(input_ids.shape[0]):
        if not weight[b].any():
            continue
        at = weight[b].nonzero()[:, 0]   # the positions that count: all of the loss, and the only
        last = int(at.max()) + 1         # ones worth a vocabulary-wide product (labels, lm_head)
        with torch.no_grad():
            logits = features[b, 1:last + 1][at].float() @ target_lm.T  # target at j + 1
            best = logits.argmax(-1)
            p = logits[:, d2t].softmax(-1)
            in_draft = t2d[best].float()
        preds = unrolled_predictions(head, layers[b:b + 1, :last + 1], input_ids[b:b + 1, :last + 1],
                                     steps)
        for k, pred in enumerate(preds):
            w = weight[b, at] * (at >= k)  # a chain k steps long has its root at entry >= 0
            draft = inner.draft_logits(pred[at]).float()
            ce = -(p * draft.log_softmax(-1)).sum(-1)
            ce_terms[k].append((ce * w * in_draft).sum())
            with torch.no_grad():
                sums[k][1] += float(((d2t[draft.argmax(-1)] == best).float() * w).sum())
                sums[k][2] += float(w.sum())
    loss, ce_out, top1 = 0.0, [], []
    for k in range(steps):
        count = max(sums[k][2], 1.0)
        ce_k = sum(ce_terms[k]) / count if ce_terms[k] else torch.zeros(())
        loss = loss + decay ** k * ce_k
        ce_out.append(float(ce_k.detach()))
        top1.append(sums[k][1] / count)
    if not torch.is_tensor(loss) or not loss.requires_grad:
        loss = loss + 0.0 * sum(q.sum() for q in head.parameters())  # no assistant token: zero
    return loss, {"loss": float(loss.detach()), "ce": ce_out, "top1": top1[0], "top1_steps": top1,
                  "tokens": int(weight.sum())}
