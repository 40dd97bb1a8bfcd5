# %% [markdown]
# # EAGLE in one page
#
# DRAFT (not executed yet; #50 item 1). The whole EAGLE loop written here from torch, the Hugging
# Face model and the shipped head's weights: nothing from `eagle_mini`'s decoding, drafting,
# verification or tree modules. `load_target` only turns the GGUF into a Hugging Face model.
#
# EAGLE (arXiv 2401.15077) in four lines:
# 1. a small head predicts the target's next *feature* (its last hidden state) from the current
#    feature and the token one step ahead (§3.1);
# 2. the head drafts a tree of candidate tokens (§3.2);
# 3. the target scores every node in one forward, with a mask that lets each node see only its
#    ancestors, and keeps the longest path it agrees with, plus one token of its own (§3.3);
# 4. the caches keep that path; the head re-reads the target's true features of it; repeat.

# %%
import copy
import json
import time

import torch
from safetensors.torch import load_file
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

from eagle_mini import load_target   # loading only: the GGUF as a Hugging Face model

torch.manual_seed(0)
target = load_target("smollm2-135m", dtype="fp32")
model, tokenizer = target.model, target.tokenizer
HEAD_DIR = "../data/heads/smollm2-135m"

# %% [markdown]
# ## Step 1: the head
# One decoder layer of the target's own type, fed `fc(cat(embed(t_{i+1}), f_i))`. Its input norm is
# dropped (features come out of the target's final norm already); the embedding and the output rows
# are the target's. The head drafts over 8,192 frequent tokens: `draft_to_target` maps them back.

# %%
class Head(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        one = copy.deepcopy(config)
        one.num_hidden_layers, one._attn_implementation = 1, "sdpa"
        hidden = config.hidden_size
        self.fc = torch.nn.Linear(2 * hidden, hidden, bias=True)
        layer = LlamaDecoderLayer(one, layer_idx=0)
        layer.input_layernorm = torch.nn.Identity()
        self.layers = torch.nn.ModuleList([layer])
        self.rotary = LlamaRotaryEmbedding(one)

    def forward(self, features, shifted, cache, positions, mask):
        """features [n, H], shifted tokens [n] -> predicted next features [n, H]."""
        x = self.fc(torch.cat([model.model.embed_tokens(shifted), features], -1))[None]
        cos_sin = self.rotary(x, positions[None])
        return self.layers[0](x, attention_mask=mask, position_ids=positions[None],
                              past_key_values=cache, use_cache=True,
                              position_embeddings=cos_sin)[0]


weights = load_file(f"{HEAD_DIR}/model.safetensors")
draft_to_target = weights.pop("draft_to_target")
head = Head(model.config)
head.load_state_dict({k: v.float() for k, v in weights.items()})
head.eval()
out_rows = model.lm_head.weight[draft_to_target]          # the draft vocabulary's output rows


def draft_topk(predicted, k):
    """The head's k best next tokens (target ids) for each predicted feature."""
    return draft_to_target[(predicted @ out_rows.T).topk(k, dim=-1).indices]


# %% [markdown]
# ## Step 2: masks and the target's forward
# A forward of n new tokens over `past` cached ones sees every cached token, and among the new ones
# what `allowed` [n, n] says: a chain is lower-triangular, a tree is "my ancestors and me".

# %%
def additive_mask(allowed, past):
    """[n, m] bool over the last m entries -> the [1, 1, n, past + n] mask HF's layers take."""
    n, m = allowed.shape
    full = torch.cat([torch.ones(n, past + n - m, dtype=torch.bool), allowed], 1)
    return torch.zeros(full.shape).masked_fill(~full, torch.finfo(torch.float32).min)[None, None]


def target_forward(tokens, cache, positions, allowed):
    past = cache.get_seq_length()
    out = model.model(input_ids=tokens[None], position_ids=positions[None],
                      attention_mask=additive_mask(allowed, past), past_key_values=cache,
                      use_cache=True)
    features = out.last_hidden_state[0]
    return features, model.lm_head(features)


def causal(n):
    return torch.ones(n, n, dtype=torch.bool).tril()


# %% [markdown]
# ## Step 3: a tree, as paths of ranks
# Node 0 is the root (the last token the target produced). `[0, 1]`: the head's 2nd guess after
# its 1st guess after the root. Each node's ancestors give its row of the mask; its depth gives
# its position.

# %%
CHOICES = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
paths = [()] + [tuple(c) for c in CHOICES]
parent = [-1] + [paths.index(p[:-1]) for p in paths[1:]]
rank = [0] + [p[-1] for p in paths[1:]]
depth = torch.tensor([len(p) for p in paths])
ancestors = torch.tensor([[paths[j] == paths[i][:len(paths[j])] for j in range(len(paths))]
                          for i in range(len(paths))])
print(ancestors.int())

# %% [markdown]
# ## Step 4: drafting the tree, level by level
# The head runs once per depth, on the nodes of that depth that have children. Its new cache
# entries sit after the stable ones (the accepted text); a node's entry may read its ancestors'.

# %%
def draft_tree(root_token, root_prediction, head_cache, stable):
    n = len(paths)
    tokens = torch.zeros(n, dtype=torch.long)
    tokens[0] = root_token
    predicted = {0: root_prediction}   # node -> the head's prediction of its child's feature
    run = []                            # nodes with head entries, in cache order
    for d in range(1, int(depth.max()) + 1):
        parents = sorted({parent[i] for i in range(n) if depth[i] == d})
        guesses = draft_topk(torch.stack([predicted[p] for p in parents]), 1 + max(rank))
        for i in range(n):
            if depth[i] == d:
                tokens[i] = guesses[parents.index(parent[i]), rank[i]]
        grow = [i for i in range(n) if depth[i] == d and i in parent]
        if grow:
            cols = run + grow
            out = head(torch.stack([predicted[parent[i]] for i in grow]), tokens[grow],
                       head_cache, torch.full((len(grow),), stable - 1 + d),
                       additive_mask(ancestors[grow][:, cols], head_cache.get_seq_length()))
            predicted.update({i: out[k] for k, i in enumerate(grow)})
            run = cols
    return tokens


# %% [markdown]
# ## Step 5: greedy verification and the bonus token
# Walk down from the root: the target's choice after the current node must be one of its children.

# %%
def verify(tokens, logits):
    path = [0]
    while True:
        want = int(logits[path[-1]].argmax())
        match = [i for i in range(len(paths)) if parent[i] == path[-1] and tokens[i] == want]
        if not match:
            return path, want            # `want` is the bonus token: the target's own
        path.append(match[0])


# %% [markdown]
# ## Step 6: cache bookkeeping
# The target cached every node; keep the accepted path's entries, as if only the path had run.

# %%
def keep(cache, past, path):
    index = torch.tensor([past + i for i in path])
    kept = [(layer.keys[:, :, index], layer.values[:, :, index]) for layer in cache.layers]
    cache.crop(past)
    for i, (k, v) in enumerate(kept):
        cache.update(k, v, i)


# %% [markdown]
# ## Step 7: the loop

# %%
@torch.no_grad()
def eagle_generate(prompt_ids, max_new_tokens):
    prompt = torch.tensor(prompt_ids)
    n = len(prompt)
    target_cache, head_cache = DynamicCache(), DynamicCache()
    features, logits = target_forward(prompt, target_cache, torch.arange(n), causal(n))
    root = int(logits[-1].argmax())
    shifted = torch.cat([prompt[1:], torch.tensor([root])])
    pred = head(features, shifted, head_cache, torch.arange(n), additive_mask(causal(n), 0))
    stable, output, cycles = n, [root], 0
    while len(output) < max_new_tokens:
        tokens = draft_tree(root, pred[-1], head_cache, stable)
        head_cache.crop(stable)
        past = target_cache.get_seq_length()
        features, logits = target_forward(tokens, target_cache, past + depth, ancestors)
        path, bonus = verify(tokens, logits)
        keep(target_cache, past, path)
        new = [int(tokens[i]) for i in path[1:]] + [bonus]
        pred = head(features[path], torch.tensor(new), head_cache,
                    torch.arange(stable, stable + len(path)),
                    additive_mask(causal(len(path)), stable))
        stable, root, cycles = stable + len(path), bonus, cycles + 1
        output += new
    return output[:max_new_tokens], (len(output) - 1) / cycles   # tau: the root came from the prefill


@torch.no_grad()
def vanilla_generate(prompt_ids, max_new_tokens):
    cache = DynamicCache()
    tokens = torch.tensor(prompt_ids)
    positions = torch.arange(len(tokens))
    output = []
    while len(output) < max_new_tokens:
        _, logits = target_forward(tokens, cache, positions, causal(len(tokens)))
        output.append(int(logits[-1].argmax()))
        tokens, positions = torch.tensor(output[-1:]), torch.tensor([cache.get_seq_length()])
    return output


# %% [markdown]
# ## The check: vanilla's tokens, and the clock

# %%
messages = [{"role": "user", "content": "Explain in three sentences why the sky is blue."}]
prompt_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
start = time.perf_counter()
ours, tau = eagle_generate(prompt_ids, 64)
eagle_s = time.perf_counter() - start
start = time.perf_counter()
reference = vanilla_generate(prompt_ids, 64)
vanilla_s = time.perf_counter() - start
print("identical to vanilla:", ours == reference)
print(f"tau {tau:.2f} tokens per cycle; EAGLE {64 / eagle_s:.1f} tok/s, "
      f"vanilla {64 / vanilla_s:.1f} tok/s: {vanilla_s / eagle_s:.2f}x")
print(tokenizer.decode(ours))
