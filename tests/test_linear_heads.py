"""The closed-form linear heads of notebook 02's live ablation (`experiments/linear_heads.py`):
the fit is the ridge least-squares solution (an independent solver as the oracle), each variant
reads what the paper's variant reads, and a toy target whose next feature is the next token's
embedding is predicted exactly by the heads that read that token and not by the others."""
import torch

from eagle_mini.experiments.linear_heads import fit, linear_ablation, readings, top1_counts
from eagle_mini.experiments.uncertainty import BY_NAME


def toy_rows(n=6, length=40, vocab=50, dim=64, seed=0):
    """f_j = e(t_j) on random token sequences: f_(i+1) is known exactly from t_(i+1) alone."""
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(vocab, dim, generator=g)
    rows = [{"features": embed[t], "input_ids": t, "loss_mask": torch.ones(length)}
            for t in torch.randint(vocab, (n, length), generator=g)]
    return rows, embed


def test_the_fit_is_the_ridge_least_squares_solution():
    rows, embed = toy_rows()
    g = torch.Generator().manual_seed(1)
    rows = [{**r, "features": r["features"] + 0.3 * torch.randn(r["features"].shape, generator=g)}
            for r in rows]
    for name in ("feature", "shifted"):
        w = fit(rows, BY_NAME[name], embed, ridge=2.0)
        x = torch.cat([readings(r, BY_NAME[name], embed)[0] for r in rows]).double()
        y = torch.cat([readings(r, BY_NAME[name], embed)[1] for r in rows]).double()
        aug_x = torch.cat([x, 2.0 ** 0.5 * torch.eye(x.shape[1], dtype=x.dtype)])
        aug_y = torch.cat([y, torch.zeros(x.shape[1], y.shape[1], dtype=y.dtype)])
        oracle = torch.linalg.lstsq(aug_x, aug_y, driver="gelsd").solution
        torch.testing.assert_close(w.double(), oracle, atol=1e-4, rtol=1e-4)


def test_each_variant_reads_its_inputs():
    rows, embed = toy_rows(n=1, length=6)
    r, f, t = rows[0], rows[0]["features"], rows[0]["input_ids"]
    x, y, mask = readings(r, BY_NAME["unshifted"], embed)
    assert torch.equal(x[2, :64], f[2]) and torch.equal(x[2, 64:128], embed[t[2]]) and x[2, -1] == 1
    x, _, _ = readings(r, BY_NAME["shifted"], embed)
    assert torch.equal(x[2, 64:128], embed[t[3]])
    x, _, _ = readings(r, BY_NAME["token"], embed)
    assert x.shape == (4, 65) and torch.equal(x[0, :64], embed[t[1]])
    assert torch.equal(y, f[1:5]) and mask.all()


def test_the_heads_that_read_the_next_token_predict_a_toy_target_exactly():
    rows, embed = toy_rows()
    result = linear_ablation(rows[:4], rows[4:], embed, embed)
    assert result["shifted"]["top1"]["estimate"] == 1.0 == result["token"]["top1"]["estimate"]
    assert result["feature"]["top1"]["estimate"] < 0.3 and result["unshifted"]["top1"]["estimate"] < 0.3


def test_only_the_assistants_positions_count():
    rows, embed = toy_rows(n=2)
    rows[1]["loss_mask"] = torch.zeros(40)
    rows[0]["loss_mask"] = torch.cat([torch.zeros(30), torch.ones(10)])
    w = fit(rows, BY_NAME["shifted"], embed)
    counts = top1_counts(rows, BY_NAME["shifted"], embed, embed, w)
    assert counts[1] == [0, 0] and counts[0][1] == 10 and counts[0][0] <= 10
