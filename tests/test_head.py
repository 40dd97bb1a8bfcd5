"""The draft head (EAGLE §3.1): its structure, its two file formats, and the checks that keep a head
on the target it was built for."""
import json
import warnings

import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from eagle_mini import EagleMiniError, tiny_target
from eagle_mini.decode import generate
from eagle_mini.heads.formats import export_official, load_official
from eagle_mini.heads.eagle1 import DraftHead, new_head
from eagle_mini.heads import load_head
from eagle_mini.target import Target

PROMPT = list(range(3, 14))


@pytest.fixture(scope="module")
def llama():
    return tiny_target("llama", seed=0)


# The layer's modules in a released Llama head, each holding one `weight`.
LLAMA_LAYER = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "post_attention_layernorm")


def perturbed(head, seed=1):
    """Random init leaves biases and norms at 0/1; perturb every weight so round trips test values."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return head


def write_official_by_hand(head, target, out_dir, drop=(), bias_key=None):
    """A released-style checkpoint built from the format's description, not from `export_official`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    state = {"embed_tokens.weight": target.model.model.embed_tokens.weight.detach().clone()}
    state["fc.weight"] = head.fc.weight.detach().clone()
    if head.fc.bias is not None:
        state["fc.bias"] = head.fc.bias.detach().clone()
    layer = head.layers[0]
    for name in LLAMA_LAYER:
        state[f"layers.0.{name}.weight"] = layer.get_submodule(name).weight.detach().clone()
    for k in drop:
        del state[k]
    torch.save(state, out_dir / "pytorch_model.bin")
    cfg = {k: v for k, v in target.config.to_dict().items() if k != "dtype"}
    cfg.update(num_hidden_layers=1, architectures=["LlamaForCausalLM"])
    if bias_key is not None:
        cfg["bias"] = bias_key
    (out_dir / "config.json").write_text(json.dumps(cfg))
    return out_dir


# --- structure ------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3"])
def test_head_is_fc_plus_one_layer_and_borrows_the_targets_embedding_and_lm_head(family):
    target = tiny_target(family, seed=0)
    head = new_head(target)
    hidden = target.hidden_size
    assert isinstance(head.fc, nn.Linear) and head.fc.bias is not None
    assert (head.fc.in_features, head.fc.out_features) == (2 * hidden, hidden)
    assert len(head.layers) == 1 and isinstance(head.layers[0].input_layernorm, nn.Identity)
    # no final norm: fc, the layer and the rotary table are the whole module
    assert {n.split(".")[0] for n, _ in head.named_modules() if n} == {"fc", "layers", "rotary"}
    # shared, never copied
    assert head._shared["embed"] is target.model.model.embed_tokens
    assert head._shared["lm_head"].data_ptr() == target.model.lm_head.weight.data_ptr()
    # only fc + the layer train and are saved
    names = {n for n, _ in head.named_parameters()}
    assert all(n.startswith(("fc.", "layers.0.")) for n in names)
    assert set(head.state_dict()) == names
    target_ids = {id(p) for p in target.model.parameters()}
    assert not target_ids & {id(p) for p in head.parameters()}
    assert all(p.requires_grad for p in head.parameters())



@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_rope_frequencies_stay_fp32_when_the_head_moves_to_a_bf16_target(kind):
    """attach() gives the head the target's dtype, but its RoPE frequencies stay the fp32
    computation, as the target's own do (Hugging Face computes them in fp32 at load): rounded to
    bf16, a large base would rotate every position slightly wrong."""
    from eagle_mini.heads.eagle3 import new_eagle3_head
    target = tiny_target("llama", seed=0, dtype="bf16", num_hidden_layers=4,
                         rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    head = (new_head if kind == "eagle1" else new_eagle3_head)(target)
    assert head.fc.weight.dtype == torch.bfloat16
    dim = target.config.hidden_size // target.config.num_attention_heads
    want = 1.0 / 500000.0 ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
    assert head.rotary.inv_freq.dtype == torch.float32
    assert torch.equal(head.rotary.inv_freq, want)
    assert torch.equal(target.model.model.rotary_emb.inv_freq, want)  # the target's, likewise

# --- official EAGLE-1 format ----------------------------------------------------------------------
def test_official_checkpoint_loads_generates_exports_and_reloads_identically(llama, tmp_path):
    head = perturbed(new_head(llama, seed=3))
    src = write_official_by_hand(head, llama, tmp_path / "released")
    loaded = load_head(src, llama)  # no model.safetensors: the official loader is used
    assert loaded.meta["format"] == "eagle-1" and loaded.fc.bias is not None
    # The same head, weight for weight (fp32 in, fp32 out: exact) ...
    assert loaded.state_dict().keys() == head.state_dict().keys()
    for k, v in head.state_dict().items():
        got = loaded.state_dict()[k]
        assert got.dtype == v.dtype == torch.float32 and torch.equal(got, v), k
    # ... drafting the same distributions on the same input (greedy output alone would not tell:
    # it is the target's whatever the head) ...
    assert_same_draft_logits(loaded, head, llama)
    ref = generate(llama, head, PROMPT, max_new_tokens=12, tree="eagle1")
    got = generate(llama, loaded, PROMPT, max_new_tokens=12, tree="eagle1")
    assert got.output_ids == ref.output_ids
    assert got.stats["confidence_accepted"] == ref.stats["confidence_accepted"]

    out = export_official(loaded, llama, tmp_path / "exported")
    written = torch.load(out / "pytorch_model.bin", weights_only=True)
    original = torch.load(src / "pytorch_model.bin", weights_only=True)
    assert written.keys() == original.keys()
    assert all(torch.equal(written[k], original[k]) for k in original)
    again = load_official(out, llama)
    assert again.state_dict().keys() == head.state_dict().keys()
    assert all(torch.equal(again.state_dict()[k], v) for k, v in head.state_dict().items())
    assert_same_draft_logits(again, head, llama)


@torch.no_grad()
def assert_same_draft_logits(got, want, target):
    """Both heads' draft logits at every position of the prompt, read with its true features."""
    step = target.forward(PROMPT, target.new_cache())
    tokens = torch.tensor(PROMPT[1:] + [int(step.logits[-1].argmax())])[None]
    a, b = (h.draft_logits(h(step.features[None], tokens)[0]) for h in (got, want))
    assert a.shape == (len(PROMPT), target.vocab_size) and b.std() > 1e-3  # not trivially flat
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_official_checkpoint_loads_without_a_target_from_its_own_config(llama, tmp_path):
    head = perturbed(new_head(llama, seed=3))
    alone = load_official(export_official(head, llama, tmp_path / "h"))
    assert alone.target_config.hidden_size == llama.hidden_size
    assert all(torch.equal(a, b) for a, b in zip(alone.state_dict().values(),
                                                   head.state_dict().values()))
    alone.attach(llama)  # the file's config still fits the target


def test_a_config_in_the_released_transformers_4_spelling_loads(llama, tmp_path):
    """LLaMA-3 heads: top-level rope_theta, "torch_dtype", "bias": false (here at tiny sizes)."""
    d = write_official_by_hand(perturbed(new_head(llama, fc_bias=False)), llama, tmp_path / "l3")
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "bias": False, "hidden_act": "silu",
        "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 512,
        "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 1,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_scaling": None,
        "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "float16",
        "transformers_version": "4.28.1", "use_cache": True, "vocab_size": 256}))
    head = load_official(d)
    assert head.fc.bias is None
    assert head.target_config.rope_parameters["rope_theta"] == 500000.0
    with_target = load_official(d, llama).target_config   # with a target: the target's fields
    assert with_target.to_dict() == llama.config.to_dict() and with_target is not llama.config


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_official_export_keeps_family_specific_weights(family, tmp_path):
    target = tiny_target(family, seed=0)
    head = perturbed(new_head(target))
    out = export_official(head, target, tmp_path / family)
    keys = set(torch.load(out / "pytorch_model.bin", weights_only=True))
    extra = ({"layers.0.self_attn.q_proj.bias", "layers.0.self_attn.k_proj.bias",
              "layers.0.self_attn.v_proj.bias"} if family == "qwen2" else
             {"layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"})
    assert extra <= keys
    again = load_official(out, target)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(),
                                                   head.state_dict().values()))


# Vicuna-7B's released head (EAGLE_REFERENCE §1): H = 4096, intermediate 11008, 32 heads, V = 32000.
VICUNA_7B_HEAD = {
    "embed_tokens.weight": (32000, 4096),
    "fc.weight": (4096, 8192),
    "fc.bias": (4096,),
    "layers.0.self_attn.q_proj.weight": (4096, 4096),
    "layers.0.self_attn.k_proj.weight": (4096, 4096),
    "layers.0.self_attn.v_proj.weight": (4096, 4096),
    "layers.0.self_attn.o_proj.weight": (4096, 4096),
    "layers.0.mlp.gate_proj.weight": (11008, 4096),
    "layers.0.mlp.up_proj.weight": (11008, 4096),
    "layers.0.mlp.down_proj.weight": (4096, 11008),
    "layers.0.post_attention_layernorm.weight": (4096,),
}


def test_export_of_a_vicuna_7b_shaped_head_has_exactly_the_released_names_and_shapes(tmp_path):
    """Built on the meta device: the real export path, without allocating 7B weights."""
    cfg = AutoConfig.for_model("llama", hidden_size=4096, intermediate_size=11008,
                               num_attention_heads=32, num_key_value_heads=32, num_hidden_layers=32,
                               vocab_size=32000, rms_norm_eps=1e-6, tie_word_embeddings=False)
    with torch.device("meta"):
        target = Target(AutoModelForCausalLM.from_config(cfg), name="vicuna-7b-shaped")
        head = new_head(target)
    out = export_official(head, target, tmp_path / "vicuna")
    state = torch.load(out / "pytorch_model.bin", weights_only=True)
    assert {k: tuple(v.shape) for k, v in state.items()} == VICUNA_7B_HEAD
    assert sum(v.numel() for k, v in state.items() if k != "embed_tokens.weight") == 235_937_792
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and config["bias"] is True
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert config["rope_theta"] == 10000.0  # where transformers 4 (serving engines) reads it
    assert (config["hidden_size"], config["intermediate_size"], config["num_attention_heads"],
            config["vocab_size"], config["rms_norm_eps"]) == (4096, 11008, 32, 32000, 1e-6)


def test_bias_free_head_exports_without_fc_bias_and_says_so(llama, tmp_path):
    head = perturbed(new_head(llama, fc_bias=False))
    out = export_official(head, llama, tmp_path / "nobias")
    assert "fc.bias" not in torch.load(out / "pytorch_model.bin", weights_only=True)
    assert json.loads((out / "config.json").read_text())["bias"] is False
    assert load_official(out, llama).fc.bias is None


def test_exporting_a_biased_head_for_vllm_warns(llama, tmp_path):
    with pytest.warns(UserWarning, match="vLLM"):
        export_official(new_head(llama), llama, tmp_path / "a", for_vllm=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        export_official(new_head(llama, fc_bias=False), llama, tmp_path / "b", for_vllm=True)


@pytest.mark.parametrize("kw, what", [({"draft_vocab": list(range(100))}, "reduced"),
                                      ({"input_mode": "feature"}, "input_mode")])
def test_only_full_vocabulary_feature_token_heads_export(llama, tmp_path, kw, what):
    with pytest.raises(EagleMiniError, match=what):
        export_official(new_head(llama, **kw), llama, tmp_path / "x")


# --- native format (safetensors + config.json) ----------------------------------------------------
def test_bf16_save_changes_weights_only_by_bf16_rounding(llama, tmp_path):
    head = perturbed(new_head(llama))
    loaded = DraftHead.load(head.save(tmp_path / "bf16"), llama)
    for k, v in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v.to(torch.bfloat16).float()), k
    assert not torch.equal(loaded.fc.weight, head.fc.weight)  # it did round


def test_fp32_save_is_exact(llama, tmp_path):
    head = perturbed(new_head(llama))
    loaded = DraftHead.load(head.save(tmp_path / "fp32", dtype=torch.float32), llama)
    for k, v in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    assert loaded.meta["format"] == "eagle_mini.heads.eagle1/1"


def test_reduced_draft_vocabulary_round_trips(llama, tmp_path):
    vocab = list(range(0, 256, 3))
    head = perturbed(new_head(llama, draft_vocab=vocab))
    loaded = DraftHead.load(head.save(tmp_path / "small", dtype=torch.float32), llama)
    assert loaded.draft_to_target.tolist() == vocab and loaded.draft_vocab_size == len(vocab)
    features = torch.randn(5, llama.hidden_size)
    logits = loaded.draft_logits(features)
    assert logits.shape == (5, len(vocab))
    full = llama.model.lm_head(features)
    assert torch.allclose(logits, full[:, vocab], atol=1e-6)  # draft id i is target id vocab[i]


# --- mismatches -----------------------------------------------------------------------------------
@pytest.mark.parametrize("other, head_value, target_value", [
    (dict(family="llama", hidden_size=32, intermediate_size=64), "64", "32"),
    (dict(family="llama", vocab_size=300), "256", "300"),
    (dict(family="qwen2"), "llama", "qwen2"),
])
def test_head_refuses_a_target_it_was_not_built_for(llama, other, head_value, target_value):
    head = new_head(llama)
    with pytest.raises(EagleMiniError) as e:
        head.attach(tiny_target(seed=0, **other))
    assert head_value in str(e.value) and target_value in str(e.value)


def test_official_checkpoint_for_another_target_is_refused_naming_both(llama, tmp_path):
    out = export_official(new_head(llama), llama, tmp_path / "h")
    with pytest.raises(EagleMiniError, match="hidden size 64 .head. vs 32 .target."):
        load_official(out, tiny_target("llama", hidden_size=32, intermediate_size=64))


def test_official_checkpoint_with_a_missing_key_names_it(llama, tmp_path):
    bad = write_official_by_hand(new_head(llama), llama, tmp_path / "bad",
                                 drop=["layers.0.mlp.down_proj.weight"])
    with pytest.raises(EagleMiniError, match="missing .*layers.0.mlp.down_proj.weight"):
        load_head(bad, llama)


def test_config_bias_false_with_an_fc_bias_in_the_file_is_an_unexpected_key(llama, tmp_path):
    bad = write_official_by_hand(new_head(llama), llama, tmp_path / "bad", bias_key=False)
    with pytest.raises(EagleMiniError, match="unexpected .*fc.bias"):
        load_official(bad, llama)


UNPICKLED = []


def _record(x):
    UNPICKLED.append(x)
    return {}


class Payload:
    """Would run `_record` if unpickled by plain pickle."""

    def __reduce__(self):
        return (_record, ("ran",))


@pytest.mark.parametrize("obj", [Payload(), [torch.zeros(2)]], ids=["code", "list"])
def test_a_checkpoint_that_is_not_a_state_dict_is_refused(llama, tmp_path, obj):
    d = write_official_by_hand(new_head(llama), llama, tmp_path / "h")
    torch.save(obj, d / "pytorch_model.bin")
    with pytest.raises(EagleMiniError, match="not a .*state dict"):
        load_official(d, llama)
    assert UNPICKLED == []


def test_default_head_finds_the_shipped_heads(smollm):
    """The shipped heads are found wherever the package's files sit (a move of `heads` once made
    `SHIPPED` point one folder too shallow, and every caller got a random head)."""
    from eagle_mini.heads import SHIPPED, default_head, head_kind
    assert (SHIPPED / "smollm2-135m" / "config.json").is_file()
    for kind in ("eagle1", "eagle3"):
        head, note = default_head(smollm, kind=kind)
        assert note.startswith("shipped") and head_kind(head) == kind, note
