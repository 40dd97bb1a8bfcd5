"""The GPU path's failures end in one line that says what to do: a gated model without a login, a
model the hub does not have, no network, CUDA out of memory; and Vicuna, whose tokenizer has no chat
template, gets FastChat's. No network and no GPU: the loaders are replaced by fakes that raise the
error types transformers and huggingface_hub raise."""
import re

import httpx
import pytest
import torch
from huggingface_hub import errors as hub_errors
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

import eagle_mini.cli.decode
import eagle_mini.models as models
from eagle_mini.cli import main
from eagle_mini.data import assistant_spans
from eagle_mini.errors import EagleMiniError

HUB = "https://huggingface.co/api/models/meta-llama/Llama-3.1-8B-Instruct"


def response(status: int) -> httpx.Response:
    return httpx.Response(status, request=httpx.Request("GET", HUB))


def wrapped(message: str, cause: Exception) -> OSError:
    """What transformers raises: an OSError whose cause is the hub's error."""
    try:
        raise OSError(message) from cause
    except OSError as e:
        return e


ERRORS = {
    "gated": lambda: hub_errors.GatedRepoError("401 Client Error. Cannot access gated repo",
                                               response=response(401)),
    "gated, as transformers wraps it": lambda: wrapped(
        "You are trying to access a gated repo.\nMake sure to have access to it",
        hub_errors.GatedRepoError("403 Client Error.", response=response(403))),
    "missing": lambda: hub_errors.RepositoryNotFoundError("401 Client Error. Repository Not Found",
                                                          response=response(401)),
    "offline": lambda: hub_errors.LocalEntryNotFoundError("Cannot find the requested files"),
    "offline, as transformers wraps it": lambda: wrapped(
        "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
        "them in the cached files.", hub_errors.LocalEntryNotFoundError("no cache")),
    "offline, the connection itself": lambda: httpx.ConnectError("[Errno -3] name resolution"),
    "cuda out of memory": lambda: torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 172.00 MiB. GPU 0 has a total capacity of 14.74 GiB"),
}
WHAT_TO_DO = {"gated": r"gated model: accept its licence .*`hf auth login`, or set HF_TOKEN",
              "missing": r"check the name, or log in \(`hf auth login` / HF_TOKEN\)",
              "offline": r"cannot reach the Hugging Face hub .* connect to the internet",
              "cuda out of memory": r"out of GPU memory loading .* use a GPU with more memory"}


def tokenizer(template=None):
    """A word-level tokenizer built in memory, with Llama's special tokens and no chat template."""
    words = ["<unk>", "<s>", "</s>", "USER:", "ASSISTANT:", "Hi!", "Hello.", "Why?"]
    tok = Tokenizer(tok_models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.chat_template = template
    return fast


def fake_loaders(monkeypatch, raises=None, where="tokenizer", tok=None):
    """Replace the loaders `load_target` calls: the tokenizer's or the model's raises `raises`;
    otherwise a tiny random Llama and `tok` come back."""
    class Model:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            if where == "model":
                raise raises
            return AutoModelForCausalLM.from_config(models.tiny_config("llama", vocab_size=8))

    class Tok:
        @staticmethod
        def from_pretrained(*args, **kwargs):
            if where == "tokenizer":
                raise raises
            return tok if tok is not None else tokenizer()

    monkeypatch.setattr(models, "AutoModelForCausalLM", Model)
    monkeypatch.setattr(models, "AutoTokenizer", Tok)
    monkeypatch.setattr(models, "offline_unless_reachable", lambda: False)   # asks no network
    monkeypatch.setattr(models, "check_device", str)   # as if this machine had the GPU asked for


# each error where loading raises it: the tokenizer's or the model's from_pretrained (memory runs
# out there too: the weights stream onto the GPU inside it, `models.load_model`)
CASES = [(case, where) for case in ERRORS for where in ("tokenizer", "model")]


@pytest.mark.parametrize("case, where", CASES)
def test_each_hub_and_memory_failure_is_one_line_saying_what_to_do(case, where, monkeypatch):
    fake_loaders(monkeypatch, ERRORS[case](), where)
    with pytest.raises(EagleMiniError) as info:
        models.load_target("meta-llama/Llama-3.1-8B-Instruct", dtype="bf16", device="cuda")
    message = str(info.value)
    assert "\n" not in message
    assert re.search(WHAT_TO_DO[case.split(",")[0]], message), message
    assert info.value.__suppress_context__  # the CLI prints the line, not the hub's traceback


def test_other_os_errors_keep_their_first_line_and_bugs_keep_their_traceback(monkeypatch):
    fake_loaders(monkeypatch, OSError("model.safetensors is truncated\nmore detail"), "model")
    with pytest.raises(EagleMiniError, match=r"^cannot load model 'some/model' from some/model: "
                                             r"model\.safetensors is truncated$"):
        models.load_target("some/model")
    fake_loaders(monkeypatch, ValueError("a bug"), "model")
    with pytest.raises(ValueError, match="a bug"):
        models.load_target("some/model")


def test_the_cli_prints_the_line_and_exits_2(monkeypatch, capsys):
    fake_loaders(monkeypatch, ERRORS["gated, as transformers wraps it"](), "tokenizer")
    assert main(["generate", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--prompt", "x"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "hf auth login" in lines[0], lines


def test_cuda_out_of_memory_during_a_command_is_one_line_too(monkeypatch, capsys):
    def runs_out(args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(eagle_mini.cli.decode, "cmd_prepare", runs_out)
    assert main(["prepare"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eagle-mini: error: out of GPU memory"), lines


VICUNA_SYSTEM = ("A chat between a curious user and an artificial intelligence assistant. The "
                 "assistant gives helpful, detailed, and polite answers to the user's questions.")


def test_vicuna_template_writes_fastchats_vicuna_v11_prompt():
    """FastChat's `get_conversation_template("vicuna")`: system, " ", then "USER: q " and
    "ASSISTANT: a</s>", ending in "ASSISTANT:" for the reply (the BOS the tokenizer would add)."""
    tok = tokenizer(models.VICUNA_TEMPLATE)
    chat = [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Why?"}]
    assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == (
        f"<s>{VICUNA_SYSTEM} USER: Hi! ASSISTANT: Hello.</s>USER: Why? ASSISTANT:")
    system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi!"}]
    assert tok.apply_chat_template(system, tokenize=False, add_generation_prompt=True) == (
        "<s>Be brief. USER: Hi! ASSISTANT:")
    # training: the loss mask covers the reply and its closing </s>
    text, spans = assistant_spans(chat[:2], tok)
    assert [text[s:e] for s, e in spans] == ["Hello.</s>"]


@pytest.mark.parametrize("name", ["vicuna-7b", "lmsys/vicuna-7b-v1.3"])
def test_vicuna_gets_its_template_and_others_without_one_get_a_one_line_error(name, monkeypatch):
    fake_loaders(monkeypatch, where=None)
    target = models.load_target(name, pack=False)
    assert target.tokenizer.chat_template == models.VICUNA_TEMPLATE
    ids = target.chat_ids("Hi!")
    assert ids[0] == target.tokenizer.bos_token_id and target.decode(ids[-2:]) == "Hi! ASSISTANT:"
    other = models.load_target("someone/no-template", pack=False)
    assert other.tokenizer.chat_template is None
    with pytest.raises(EagleMiniError, match=r"^someone/no-template's tokenizer has no chat "
                                             r"template: set tokenizer\.chat_template"):
        other.chat_ids("Hi!")


def test_a_template_the_tokenizer_has_is_kept(monkeypatch):
    fake_loaders(monkeypatch, where=None, tok=tokenizer("{{ 'own' }}"))
    assert models.load_target("vicuna-7b", pack=False).tokenizer.chat_template == "{{ 'own' }}"


@pytest.fixture
def hub_online_mode(monkeypatch):
    """Offline mode off, as a new user's shell has it, and restored after the test (the check
    under test turns it on for the whole process)."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    models._hub_answered.cache_clear()
    yield constants
    models._hub_answered.cache_clear()


def test_an_unreachable_hub_is_asked_once_then_offline_mode_gives_the_line(hub_online_mode,
                                                                           monkeypatch, capfd):
    asked = []
    monkeypatch.setattr(models, "hub_reachable", lambda: asked.append(1) or False)
    for _ in range(2):
        assert main(["generate", "--model", "someone/made-up-model", "--prompt", "x"]) == 2
    err = capfd.readouterr().err
    assert asked == [1] and hub_online_mode.HF_HUB_OFFLINE
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all(re.search(WHAT_TO_DO["offline"], line) for line in lines), err


def test_a_made_up_hub_id_is_one_line_without_retries(hub_online_mode, monkeypatch, capfd):
    """No network (the hub's address does not answer; the test sends nothing out): the hub's
    client never gets to retry each file."""
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    assert main(["generate", "--model", "someone/made-up-model-45", "--prompt", "x"]) == 2
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Retrying" not in err, err
    assert re.search(WHAT_TO_DO["offline"] + "|" + WHAT_TO_DO["missing"], lines[0]), lines[0]


def test_a_device_this_machine_lacks_is_one_line_naming_what_it_has(monkeypatch):
    """A torch built without CUDA and a machine without a GPU need different fixes: the line
    says which it is, and names the devices there are."""
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    with pytest.raises(EagleMiniError, match=r"built without CUDA.* this machine has: cpu$"):
        models.check_device("cuda")
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(EagleMiniError, match=r"torch sees no CUDA device .*this machine has cpu$"):
        models.check_device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert models.check_device("cuda:1") == "cuda:1" and models.check_device("cuda") == "cuda"
    with pytest.raises(EagleMiniError, match=r"'cuda:2' does not exist; this machine has cpu, "
                                             r"cuda:0, cuda:1"):
        models.check_device("cuda:2")
    for bad in ("tpu", "garbage", "meta"):
        with pytest.raises(EagleMiniError, match="use one of cpu, cuda, mps"):
            models.check_device(bad)
    with pytest.raises(EagleMiniError, match="cuda"):   # the Python API checks before loading
        models.load_target("no-such-model-either", device="cuda:2")
