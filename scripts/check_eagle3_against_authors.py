"""Check once that an exported EAGLE-3 head computes the same numbers in the authors' own code.

    .venv/bin/python scripts/check_eagle3_against_authors.py /path/to/EAGLE [--head DIR] [--json F]

The first argument is a checkout of github.com/SafeAILab/EAGLE (the directory that holds
`eagle/model/cnets.py`). Their code is imported from there at run time; none of it is part of this
project. Without `--head` a random EAGLE-3 head is built for the target (random draft vocabulary of
`--draft-vocab` ids, random fc and layer, the target's lm_head rows, every RMSNorm weight scaled by
U(0.5, 1.5) so that the norms matter). The head is exported with `export_eagle3` in float32 and
then loaded twice from that directory: by `eagle_mini.load_head` ("ours") and by the authors'
`eagle.model.cnets.Model` ("theirs", its embedding taken from the target, as their
`load_emb=True` does). Both get the same inputs: the hidden states entering the target's layers
`aux_layers` for a real prompt, and the shifted tokens.

Compared (max |ours - theirs|, with the largest |theirs| for scale):
  a. the draft layer's outputs over the prompt (the stable pass);
  b. the logits lm_head(norm(.)) at every position;
  c. the top-k draft ids of every position mapped to target ids (ours: `draft_to_target`; theirs:
     `i + d2t[i]`);
  d. the authors' whole EAGLE-2 drafting routine (`Model.topK_genrate`, depth 7, top-k 10, 60
     tokens) run once with their model and once with our head in its place: the output of every
     draft forward (the second and later ones read the previous step's output), and the returned
     draft tokens, tree mask, positions and retrieve indices, which must be identical;
  e. our own drafter (`Drafter`, `DynamicTree(60, 8, 10)`, i.e. their depth 7) against the same
     tree: the set of root-to-node token paths;
  f. the authors' own target code (`eagle.model.modeling_llama_kv.LlamaForCausalLM`, with the
     target's weights): its hidden states of layers 2, L//2, L-3 against `Target.forward`'s,
     and the logits of their draft on their features against ours on ours;
  g. the same export with `rope_theta` removed from config.json, the way the authors' own
     training config (`eagle/traineagle3/config.json`) is written: their inference code then
     uses RoPE base 10000 (their training code always does), and so must `load_head`, which
     rotates as the file says (the target's base only when the file names it).

Shims for transformers 5 (in memory only, the authors' files are not changed): a config keeps
`rope_scaling` and `rope_theta` as config.json writes them (transformers 5 folds both into
`rope_parameters` and aliases `rope_scaling` to it, which their code reads as a scaling dict);
their target model gets eager attention and a dict `_tied_weights_keys`.

Exit status 1 if a numeric check exceeds `--tol` (relative to the largest |theirs|) or the trees
differ.
"""
import argparse
import importlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch


def authors_commit(checkout: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        f = checkout / "COMMIT"   # a snapshot exported with `git archive` (write the hash there)
        return f.read_text().strip() if f.exists() else "unknown"


def legacy_rope_view(config, rope_scaling, rope_theta):
    """Give `config` the fields transformers 4.x would read from config.json: `rope_scaling` as
    written there (None if absent) and `rope_theta` only where it is written."""
    cls = type(config)
    config.__class__ = type(cls.__name__, (cls,), {
        "rope_scaling": property(lambda self: rope_scaling, lambda self, value: None)})
    if rope_theta is not None:
        config.rope_theta = rope_theta
    elif "rope_theta" in vars(config):
        del config.rope_theta
    return config


def load_theirs(cnets, draft_dir: Path, target, depth=7, top_k=10, total_tokens=60):
    """The authors' Model for an exported directory; -> (model, key report)."""
    from safetensors.torch import load_file
    raw = json.loads((draft_dir / "config.json").read_text())
    config = legacy_rope_view(cnets.EConfig.from_pretrained(str(draft_dir)),
                              raw.get("rope_scaling"), raw.get("rope_theta"))
    model = cnets.Model(config, load_emb=False, total_tokens=total_tokens, depth=depth, top_k=top_k)
    state = load_file(draft_dir / "model.safetensors")
    res = model.load_state_dict(state, strict=False)   # what the file alone provides
    keys = {"missing": sorted(res.missing_keys), "unexpected": sorted(res.unexpected_keys)}
    state["embed_tokens.weight"] = target.model.model.embed_tokens.weight.detach().float()
    model.load_state_dict(state, strict=True)          # + the embedding, as load_emb=True does
    model = model.float().eval()
    model.init_tree()
    rot = model.midlayer.self_attn.rotary_emb
    keys["rope_base"] = rot.base
    return model, keys


class OursInTheirDrafter:
    """Our head behind the attributes the authors' `Model.topK_genrate` reads, so their drafting
    routine runs on our numbers. Their tree mask [1, 1, n, m] (1 = visible, over the last m
    cache entries) is what `attention_mask_4d` reads as an [n, m] bool mask."""

    def __init__(self, head, theirs):
        self.head = head
        self.total_tokens, self.depth, self.top_k = theirs.total_tokens, theirs.depth, theirs.top_k
        self.config = SimpleNamespace(vocab_size=head.target_config.vocab_size,
                                      draft_vocab_size=head.draft_vocab_size)
        self.lm_head, self.norm = head.lm_head, head.norm
        self.logsoftmax = torch.nn.LogSoftmax(dim=-1)
        self.d2t = head.draft_to_target - torch.arange(head.draft_vocab_size)
        self.embed_tokens = SimpleNamespace(weight=head.fc.weight)  # only its device is read
        self.stable_kv = self.tree_mask = None
        self.outputs = []

    def reset(self):
        self.tree_mask = None

    def __call__(self, hidden_states, input_ids, past_key_values=None, position_ids=None,
                 use_cache=True):
        cache = past_key_values if past_key_values is not None else self.head.new_cache()
        mask = None if self.tree_mask is None else self.tree_mask[0, 0].bool()
        out = self.head(hidden_states, input_ids, cache=cache, positions=position_ids,
                        tree_mask=mask)
        self.outputs.append(out)
        return out, cache


def recording(model):
    """Record every output of the authors' `Model.forward` in `model.recorded`."""
    model.recorded = []
    forward = model.forward

    def wrapped(*args, **kw):
        out = forward(*args, **kw)
        model.recorded.append(out[0] if isinstance(out, tuple) else out)
        return out
    model.forward = wrapped
    return model


def diff(ours, theirs) -> dict:
    return {"max_abs_diff": float((ours.float() - theirs.float()).abs().max()),
            "max_abs_theirs": float(theirs.float().abs().max())}


def paths_of_authors_tree(tokens, mask, positions) -> set:
    tokens, mask, positions = tokens[0].tolist(), mask[0, 0].bool(), positions.tolist()
    return {tuple(tokens[j] for j in sorted(mask[i].nonzero().flatten().tolist(),
                                            key=lambda j: positions[j]))
            for i in range(len(tokens))}


def paths_of_our_tree(draft) -> set:
    parents, tokens, out = draft.tree.parents, draft.tokens.tolist(), set()
    for i in range(len(tokens)):
        path, j = [], i
        while j >= 0:
            path.append(tokens[j])
            j = parents[j]
        out.add(tuple(reversed(path)))
    return out


def authors_target_layers(checkout_module, target, ids):
    """Their target code (modeling_llama_kv) with the target's weights -> [n, 3H] hidden states."""
    import copy
    cfg = copy.deepcopy(target.config)
    cfg._attn_implementation = "eager"  # transformers 5 refuses sdpa for their class
    rope = getattr(cfg, "rope_parameters", None) or {}
    legacy_rope_view(cfg, None if rope.get("rope_type", "default") == "default" else rope,
                     rope.get("rope_theta"))
    cls = checkout_module.LlamaForCausalLM
    cls._tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}  # 5.x wants a dict
    model = cls(cfg)
    res = model.load_state_dict(target.model.state_dict(), strict=False)
    if res.unexpected_keys or any(not k.endswith("rotary_emb.inv_freq") for k in res.missing_keys):
        raise RuntimeError(f"their target does not take the target's weights: {res}")
    model = model.float().eval()
    with torch.no_grad():
        out = model.model(input_ids=torch.tensor([ids]))
    return torch.cat(out.hidden_states, dim=-1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("authors", type=Path, help="checkout of SafeAILab/EAGLE")
    ap.add_argument("--head", help="an EAGLE-3 head directory (ours or the authors' layout); "
                                   "default: a random head")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompt", default="Explain in three short sentences why the sky is blue, "
                                        "and why sunsets are red.")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-5, help="relative to the largest |theirs|")
    ap.add_argument("--json", type=Path, help="write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from eagle_mini import DynamicTree, load_head, load_target
    from eagle_mini.draft import Drafter
    from eagle_mini.heads.eagle3 import Eagle3Head, new_eagle3_head
    from eagle_mini.heads.formats import export_eagle3

    checkout = args.authors.resolve()
    if not (checkout / "eagle" / "model" / "cnets.py").exists():
        sys.exit(f"{checkout} is not a checkout of SafeAILab/EAGLE (no eagle/model/cnets.py)")
    sys.path.insert(0, str(checkout))
    cnets = importlib.import_module("eagle.model.cnets")

    target = load_target(args.target, pack=False)
    if args.head:
        source = load_head(args.head, target)
        if not isinstance(source, Eagle3Head):
            sys.exit(f"{args.head} is not an EAGLE-3 head")
        source = source.float()
    else:
        g = torch.Generator().manual_seed(args.seed)
        vocab = torch.randperm(target.vocab_size, generator=g)[:args.draft_vocab].sort().values
        source = new_eagle3_head(target, seed=args.seed, draft_vocab=vocab.tolist())
        with torch.no_grad():
            for name, p in source.named_parameters():
                if name.endswith("norm.weight"):
                    p.mul_(torch.rand(p.shape, generator=g) + 0.5)

    report = {"command": "python scripts/check_eagle3_against_authors.py " + " ".join(sys.argv[1:]),
              "authors_commit": authors_commit(checkout), "target": args.target,
              "head": args.head or f"random (seed {args.seed})",
              "draft_vocab_size": source.draft_vocab_size, "aux_layers": list(source.aux_layers),
              "transformers": importlib.import_module("transformers").__version__,
              "torch": torch.__version__}
    failures = []

    def check(name, d):
        report[name] = d
        if d["max_abs_diff"] > args.tol * max(d["max_abs_theirs"], 1.0):
            failures.append(name)

    work = Path(tempfile.mkdtemp(prefix="eagle3-authors-"))
    try:
        out_dir = export_eagle3(source, target, work / "export", dtype=torch.float32)
        ours = load_head(out_dir, target).float().eval()
        theirs, keys = load_theirs(cnets, out_dir, target)
        report["their_load_state_dict_from_file"] = keys
        if keys["unexpected"] or keys["missing"] != ["embed_tokens.weight"]:
            failures.append("keys")

        ids = target.chat_ids(args.prompt)
        step = target.forward(ids, target.new_cache(), hidden_layers=ours.aux_layers)
        layers, root = step.layers.float(), int(step.logits[-1].argmax())
        shifted = torch.tensor([ids[1:] + [root]])
        n = len(ids)
        report["prompt_tokens"] = n
        with torch.no_grad():
            # a, b, c: the stable pass over the prompt
            o = ours(layers[None], shifted, cache=ours.new_cache())[0]
            t, _ = theirs(layers[None], input_ids=shifted, use_cache=True)
            t = t[0]
            check("a_layer_output", diff(o, t))
            lo, lt = ours.draft_logits(o), theirs.lm_head(theirs.norm(t))
            check("b_logits", diff(lo, lt))
            k = theirs.top_k
            ko = ours.draft_to_target[lo.topk(k, dim=-1).indices]
            it = lt.topk(k, dim=-1).indices
            kt = it + theirs.d2t[it]
            same = (ko == kt).all(-1)
            report["c_topk_target_ids"] = {"k": k, "positions": n,
                                           "positions_identical": int(same.sum()),
                                           "last_position_ours": ko[-1].tolist(),
                                           "last_position_theirs": kt[-1].tolist()}
            if not bool(same.all()):
                failures.append("c_topk_target_ids")

            # d: their drafting routine, their model vs our head in its place
            full_ids = torch.tensor([ids + [root]])
            recording(theirs).reset_kv()
            drafted_t = theirs.topK_genrate(layers[None], full_ids, None, None)
            theirs.reset()  # topK_genrate leaves its last tree mask set
            shim = OursInTheirDrafter(ours, theirs)
            cnets.Model.init_tree(shim)
            drafted_o = cnets.Model.topK_genrate(shim, layers[None], full_ids, None, None)
            steps = []
            for i, (a, b) in enumerate(zip(shim.outputs, theirs.recorded)):
                d = diff(a, b)
                d["logits"] = diff(ours.draft_logits(a), theirs.lm_head(theirs.norm(b)))
                d["rows"] = a.shape[1]
                steps.append(d)
            report["d_draft_forwards"] = steps
            worst = {"max_abs_diff": max(max(s["max_abs_diff"], s["logits"]["max_abs_diff"])
                                         for s in steps),
                     "max_abs_theirs": max(max(s["max_abs_theirs"], s["logits"]["max_abs_theirs"])
                                           for s in steps)}
            if len(shim.outputs) != len(theirs.recorded):
                failures.append("d_draft_forwards (count)")
            elif worst["max_abs_diff"] > args.tol * max(worst["max_abs_theirs"], 1.0):
                failures.append("d_draft_forwards")
            names = ("draft_tokens", "retrieve_indices", "tree_mask", "tree_position_ids")
            same = {nm: bool(torch.equal(a, b)) for nm, a, b in zip(names, drafted_o, drafted_t)}
            report["d_topK_genrate_identical"] = same
            if not all(same.values()):
                failures.append("d_topK_genrate")

            # e: our own drafter, EAGLE-2 dynamic tree with their settings
            drafter = Drafter(ours, tree=DynamicTree(theirs.total_tokens + 1, theirs.depth + 1,
                                                     theirs.top_k))
            drafter.extend(layers, shifted[0])
            mine = drafter.draft(root)
            po = paths_of_our_tree(mine)
            pt = paths_of_authors_tree(*[drafted_t[i] for i in (0, 2, 3)])
            report["e_our_drafter_vs_topK_genrate"] = {
                "nodes_ours": len(mine.tokens), "nodes_theirs": drafted_t[0].shape[1],
                "same_paths": po == pt, "only_ours": len(po - pt), "only_theirs": len(pt - po)}
            if po != pt:
                failures.append("e_our_drafter")

            # f: the authors' target code
            try:
                kv = importlib.import_module("eagle.model.modeling_llama_kv")
                their_layers = authors_target_layers(kv, target, ids)
                check("f_target_layers", diff(layers, their_layers))
                t2, _ = theirs(their_layers[None], input_ids=shifted, use_cache=True)
                check("f_end_to_end_logits", diff(lo, theirs.lm_head(theirs.norm(t2[0]))))
            except Exception as e:  # their target code is a bonus; report, do not hide
                report["f_target_layers"] = f"not run: {type(e).__name__}: {e}"

            # g: a config without rope_theta (how their own training config is written)
            bare = work / "no-rope-theta"
            shutil.copytree(out_dir, bare)
            cfg = json.loads((bare / "config.json").read_text())
            cfg.pop("rope_theta", None)
            cfg.pop("rope_parameters", None)
            (bare / "config.json").write_text(json.dumps(cfg, indent=2))
            theirs_bare, keys_bare = load_theirs(cnets, bare, target)
            ours_bare = load_head(bare, target).float().eval()
            ob = ours_bare(layers[None], shifted, cache=ours_bare.new_cache())[0]
            ob = ours_bare.draft_logits(ob)
            tb, _ = theirs_bare(layers[None], input_ids=shifted, use_cache=True)
            tb = theirs_bare.lm_head(theirs_bare.norm(tb[0]))
            check("g_no_rope_theta_logits", {
                **diff(ob, tb), "their_rope_base": keys_bare["rope_base"],
                "our_rope_base": ours_bare.layer_config.rope_parameters["rope_theta"],
                "top1_agreement": float((ob.argmax(-1) == tb.argmax(-1)).float().mean())})
    finally:
        shutil.rmtree(work, ignore_errors=True)

    report["failures"] = failures
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    print("OK: the exported head computes the same numbers in the authors' code" if not failures
          else f"MISMATCH: {', '.join(failures)}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
