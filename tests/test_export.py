"""EAGLE-3 heads in and out of the authors' layout (reference §5): what a file says about the
draft's positions, layers and layer survives every load, save, export and training step, and what
serving engines read is written the way they read it."""
import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AttentionInterface

from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.heads import load_head
from eagle_mini.heads.eagle3 import Eagle3Head, new_eagle3_head
from eagle_mini.heads.formats import export_eagle3, load_eagle3
from eagle_mini.runtime.packed import available, pack_linears
from eagle_mini.training.chains import CHAIN_ATTENTION, chain_attention, unrolled_predictions


def inputs(head, n=6, seed=0):
    """Fused target layers [1, n, 3H] and shifted tokens [1, n] to run a head on."""
    g = torch.Generator().manual_seed(seed)
    h = head.fc.out_features
    return torch.randn(1, n, 3 * h, generator=g), torch.randint(0, 64, (1, n), generator=g)


def logits(head, x, t):
    with torch.no_grad():
        return head.draft_logits(head(x, t))


def default_inv_freq(head, theta):
    dim = head.rotary.inv_freq.numel() * 2
    return 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)


def rope_of(cfg: dict) -> dict:
    return {k: cfg.get(k) for k in ("rope_theta", "rope_scaling", "rope_parameters")}


def write_config(out, **changes):
    cfg = json.loads((out / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg))


# --- the head owns its RoPE -----------------------------------------------------------------------
def authors_file_with_base_10000(tmp_path):
    """A target rotating with base 500000 and a published draft for it whose config omits the
    base: the authors' loader then uses 10000, and so must we, from then on."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    out = export_eagle3(new_eagle3_head(target, seed=5), target, tmp_path / "authors",
                        dtype=torch.float32)
    write_config(out, rope_theta=None, rope_parameters=None, rope_scaling=None)
    return target, out


def test_a_files_rope_survives_save_load_export_and_reexport(tmp_path):
    target, out = authors_file_with_base_10000(tmp_path)
    head = load_head(out, target)
    assert torch.equal(head.rotary.inv_freq, default_inv_freq(head, 10000.0))
    x, t = inputs(head)
    want = logits(head, x, t)
    ours = load_head(head.save(tmp_path / "ours", dtype=torch.float32), target)
    assert torch.equal(ours.rotary.inv_freq, default_inv_freq(head, 10000.0))
    torch.testing.assert_close(logits(ours, x, t), want, atol=1e-6, rtol=1e-5)
    assert ours.rope == head.rope and head.rope["rope_theta"] == 10000.0
    again = export_eagle3(ours, target, tmp_path / "again", dtype=torch.float32)
    cfg = json.loads((again / "config.json").read_text())
    assert cfg["rope_theta"] == 10000.0 and cfg["rope_parameters"]["rope_theta"] == 10000.0
    back = load_head(again, target)
    assert back.rope == head.rope
    torch.testing.assert_close(logits(back, x, t), want, atol=0, rtol=0)


def test_a_head_loaded_from_a_file_trains_through_chain_attention(tmp_path):
    """Training switches the attention of the head's layer to `chain_attention`; a head whose
    RoPE came from its file must be switched too (its layer reads the head's own config)."""
    target, out = authors_file_with_base_10000(tmp_path)
    head = load_eagle3(out, target)
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return chain_attention(*args, **kwargs)

    AttentionInterface.register(CHAIN_ATTENTION, counting)
    try:
        x, t = inputs(head, n=7)
        unrolled_predictions(head, x, t, steps=3)
    finally:
        AttentionInterface.register(CHAIN_ATTENTION, chain_attention)
    assert len(calls) == 2   # passes 1 and 2; pass 0 is plain causal
    assert isinstance(head, Eagle3Head)


# --- rope-scaled targets (Llama-3.1) --------------------------------------------------------------
LLAMA31_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


def test_a_rope_scaled_head_exports_rope_scaling_and_round_trips_exactly(tmp_path):
    """SGLang reads `rope_scaling` and `rope_theta`, transformers 5 `rope_parameters`: all three
    are written, and the exported head drafts exactly as before."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4,
                         rope_parameters=dict(LLAMA31_ROPE))
    head = new_eagle3_head(target, seed=5, draft_vocab=list(range(0, 64, 2)))
    out = export_eagle3(head, target, tmp_path / "e3", dtype=torch.float32)
    cfg = json.loads((out / "config.json").read_text())
    scaling = {k: v for k, v in LLAMA31_ROPE.items() if k != "rope_theta"}
    assert cfg["rope_scaling"] == scaling and cfg["rope_theta"] == 500000.0
    assert cfg["rope_parameters"] == LLAMA31_ROPE
    back = load_head(out, target)
    assert back.rope == LLAMA31_ROPE
    assert torch.equal(back.rotary.inv_freq, target.model.model.rotary_emb.inv_freq)
    x, t = inputs(head)
    torch.testing.assert_close(logits(back, x, t), logits(head, x, t), atol=0, rtol=0)
    cfg.pop("rope_parameters")   # a writer that knows only the older keys
    (out / "config.json").write_text(json.dumps(cfg))
    assert load_head(out, target).rope == LLAMA31_ROPE


# --- which target layers the draft reads ----------------------------------------------------------
def test_custom_layers_are_written_in_each_engines_convention_and_round_trip(tmp_path):
    """Our layers are Hugging Face `hidden_states` indices (the input of layer i). SGLang (and
    SpecForge) read `eagle_config.eagle_aux_hidden_state_layer_ids` as layer *outputs* and add 1;
    vLLM reads a top-level `eagle_aux_hidden_state_layer_ids` as inputs, as ours."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=8)
    head = new_eagle3_head(target, seed=5, layers=(1, 4, 6))
    out = export_eagle3(head, target, tmp_path / "e3", dtype=torch.float32)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 3, 5]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [1, 4, 6]
    back = load_head(out, target)
    assert back.aux_layers == (1, 4, 6)
    x, t = inputs(head)
    torch.testing.assert_close(logits(back, x, t), logits(head, x, t), atol=0, rtol=0)
    write_config(out, eagle_aux_hidden_state_layer_ids=None)   # as SpecForge writes it
    assert load_head(out, target).aux_layers == (1, 4, 6)
    default = export_eagle3(new_eagle3_head(target), target, tmp_path / "default")
    cfg = json.loads((default / "config.json").read_text())
    assert "eagle_config" not in cfg and "eagle_aux_hidden_state_layer_ids" not in cfg


def test_layers_the_two_keys_disagree_on_are_refused(tmp_path):
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=8)
    out = export_eagle3(new_eagle3_head(target, layers=(1, 4, 6)), target, tmp_path / "e3")
    write_config(out, eagle_aux_hidden_state_layer_ids=[0, 3, 5])
    with pytest.raises(EagleMiniError, match="eagle_aux_hidden_state_layer_ids"):
        load_head(out, target)


@pytest.mark.parametrize("layers", [(0, 4, 6), (2, 4, 8)])
def test_layers_no_engine_captures_are_not_exported(tmp_path, layers):
    """Engines capture the input of a decoder layer 1..L-1: never the embeddings (0) nor the
    last state (L, after the final norm in Hugging Face)."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=8)
    with pytest.raises(EagleMiniError, match="1 to 7"):
        export_eagle3(new_eagle3_head(target, layers=layers), target, tmp_path / "e3")


# --- the draft layer is a Llama layer, whatever the target ----------------------------------------
@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_a_qwen_targets_head_exports_as_a_llama_draft_and_round_trips(tmp_path, family):
    """The authors' draft layer is a Llama layer (`LlamaForCausalLMEagle3`, bias-free q/k/v/o, no
    q/k norms) for any target: a Qwen2 or Qwen3 target's head exports so and loads back exactly."""
    target = tiny_target(family, seed=0, vocab_size=64, num_hidden_layers=4)
    head = new_eagle3_head(target, seed=5)
    out = export_eagle3(head, target, tmp_path / "e3", dtype=torch.float32)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "llama" and cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["attention_bias"] is False and cfg["head_dim"] == 64 // 4   # tiny_config
    names = set(load_file(out / "model.safetensors"))
    assert not {n for n in names if n.endswith(".bias") or "q_norm" in n or "k_norm" in n}
    back = load_head(out, target)
    x, t = inputs(head)
    torch.testing.assert_close(logits(back, x, t), logits(head, x, t), atol=0, rtol=0)


def test_a_target_with_attention_biases_gets_a_bias_free_draft(tmp_path):
    """SGLang's EAGLE-3 Llama layer has no q/k/v biases: a draft with them would lose them
    there. The draft is bias-free as the authors' is, and its config says so."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4, attention_bias=True)
    head = new_eagle3_head(target, seed=5)
    assert not [n for n in head.state_dict() if n.endswith(".bias")]
    out = export_eagle3(head, target, tmp_path / "e3", dtype=torch.float32)
    assert json.loads((out / "config.json").read_text())["attention_bias"] is False
    x, t = inputs(head)
    torch.testing.assert_close(logits(load_head(out, target), x, t), logits(head, x, t),
                               atol=0, rtol=0)


def test_the_files_rms_norm_eps_is_honoured_and_kept(tmp_path):
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)
    out = export_eagle3(new_eagle3_head(target, seed=5), target, tmp_path / "e3",
                        dtype=torch.float32)
    write_config(out, rms_norm_eps=1e-2)
    head = load_head(out, target)
    assert {m.variance_epsilon for m in (head.norm, head.midlayer.hidden_norm,
                                         head.midlayer.input_layernorm,
                                         head.midlayer.post_attention_layernorm)} == {1e-2}
    ours = load_head(head.save(tmp_path / "ours", dtype=torch.float32), target)
    assert ours.norm.variance_epsilon == 1e-2
    again = export_eagle3(ours, target, tmp_path / "again")
    assert json.loads((again / "config.json").read_text())["rms_norm_eps"] == 1e-2


# --- the shipped heads through `export` -----------------------------------------------------------
def draft_logits_of(head, target, n=5):
    """The head's draft logits on the target's own features of a short text: [n, draft_vocab]."""
    ids = torch.tensor([target.chat_ids("Why is the sky blue?")[:n + 1]])
    with torch.no_grad():
        out = target.model(ids, output_hidden_states=True)
        layers = getattr(head, "aux_layers", None)
        features = (torch.cat([out.hidden_states[i] for i in layers], dim=-1) if layers
                    else out.hidden_states[-1])
        return head.draft_logits(head(features[:, :n], ids[:, 1:n + 1])[0])


def test_the_default_head_exports_in_the_eagle1_layout_and_drafts_alike_loaded_back(
        tmp_path, smollm, capsys):
    """The shipped default head has a reduced draft vocabulary, which EAGLE-1's layout cannot hold:
    `export` writes its weights over the full vocabulary and the draft vocabulary as SGLang's
    token map, and loading both back gives the same head: same draft logits, same decoding."""
    from eagle_mini import default_head, generate
    from eagle_mini.cli import main
    from eagle_mini.heads.formats import TOKEN_MAP, load_official
    assert main(["export", "--out", str(tmp_path / "e1")]) == 0
    said = capsys.readouterr().out.strip().splitlines()
    assert len(said) == 1 and TOKEN_MAP in said[0] and "full 49,152-token vocabulary" in said[0]
    shipped, _ = default_head(smollm)
    assert shipped.draft_vocab_size < smollm.vocab_size
    back = load_head(tmp_path / "e1", smollm)
    assert back.meta["format"] == "eagle-1"
    assert torch.equal(back.draft_to_target, shipped.draft_to_target)
    assert torch.equal(torch.load(tmp_path / "e1" / TOKEN_MAP), shipped.draft_to_target)
    # equal weights; the layer's attention kernel may differ (sdpa from the target's config, the
    # saved head's own default), so the logits agree to float rounding
    torch.testing.assert_close(draft_logits_of(back, smollm), draft_logits_of(shipped, smollm),
                               atol=1e-4, rtol=1e-4)
    a = generate(smollm, shipped, "Name a colour.", 16, tree="eagle2")
    b = generate(smollm, back, "Name a colour.", 16, tree="eagle2")
    assert a.output_ids == b.output_ids and a.stats["cycle_lengths"] == b.stats["cycle_lengths"]
    # without the token map, the same weights draft over the whole vocabulary (an EAGLE-1 reader)
    (tmp_path / "e1" / TOKEN_MAP).unlink()
    full = load_official(tmp_path / "e1", smollm)
    assert full.draft_vocab_size == smollm.vocab_size
    torch.testing.assert_close(draft_logits_of(full, smollm)[:, shipped.draft_to_target],
                               draft_logits_of(shipped, smollm), atol=1e-4, rtol=1e-4)


def test_export_format_eagle3_writes_the_shipped_eagle3_head_as_its_readme_says(
        tmp_path, smollm, capsys):
    from eagle_mini import default_head
    from eagle_mini.cli import main
    assert main(["export", "--format", "eagle3", "--out", str(tmp_path / "e3")]) == 0
    assert "wrote the eagle3 layout" in capsys.readouterr().out
    state = load_file(tmp_path / "e3" / "model.safetensors")
    shipped, _ = default_head(smollm, kind="eagle3")
    assert torch.equal(torch.arange(state["d2t"].numel()) + state["d2t"], shipped.draft_to_target)
    back = load_head(tmp_path / "e3", smollm)
    torch.testing.assert_close(draft_logits_of(back, smollm), draft_logits_of(shipped, smollm))


def test_a_reduced_vocabulary_head_is_refused_by_the_python_export_unless_asked(tmp_path):
    from eagle_mini.heads.eagle1 import new_head
    from eagle_mini.heads.formats import export_official
    target = tiny_target("llama", seed=0, vocab_size=64)
    head = new_head(target, seed=0, draft_vocab=list(range(0, 64, 2)))
    with pytest.raises(EagleMiniError, match=r"full_vocabulary=True\) .* token_map\.pt"):
        export_official(head, target, tmp_path / "refused")
    back = load_head(export_official(head, target, tmp_path / "e1", full_vocabulary=True), target)
    assert torch.equal(back.draft_to_target, head.draft_to_target)


def test_an_fp32_export_is_bit_identical_run_with_the_same_kernels(tmp_path):
    """An fp32 export holds the head's weights bit for bit, so the head loaded back gives the
    head's draft logits exactly, when both run on the same kernels. Decoding lays a head's linears
    out once for oneDNN (`run.pick_head`), which sums in another order than the stock kernels:
    a packed head against an unpacked copy differs by float noise, not by a bug in export or
    load (notebook 08 §6 compares them packed alike)."""
    target = tiny_target("llama", seed=0, vocab_size=64, num_hidden_layers=4)
    head = new_eagle3_head(target, seed=5)
    back = load_head(export_eagle3(head, target, tmp_path / "e3", dtype=torch.float32), target)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in head.state_dict().items())
    x, t = inputs(head, n=9)
    assert torch.equal(logits(back, x, t), logits(head, x, t))
    if not available(torch.float32, "onednn"):
        pytest.skip("this torch build packs no fp32 weights for oneDNN")
    for h in (head, back):
        for module in (h, *h.frozen_linears()):
            pack_linears(module, "onednn")
    assert torch.equal(logits(back, x, t), logits(head, x, t))
