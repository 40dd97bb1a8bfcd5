"""Loading streams the weights (issue 49, item 3): off the CPU `load_target` asks Hugging Face to
place every shard's tensors on the device as they are read (`device_map`), never building the
model in host memory first; free Colab has less RAM than a 7B model. On a CPU the test checks the
arguments a CUDA load is given and that loading a sharded checkpoint maps its files instead of
reading them into memory: peak host memory over the load stays well under the model's bytes."""
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from eagle_mini import models
from eagle_mini.models import load_kwargs, load_target, tiny_config

ROOT = Path(__file__).resolve().parent.parent

# Peak resident memory of a process over one `load_model`, from the kernel's high-water mark
# (reset through /proc/self/clear_refs, Linux), printed as "<peak over before> <model bytes>".
PEAK = """
import sys, torch
from eagle_mini.models import load_model
def kb(field):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field)) * 1024
open("/proc/self/clear_refs", "w").write("5")
before = kb("VmRSS:")
model = load_model(sys.argv[1], "bf16", "cpu")
print(kb("VmHWM:") - before, sum(p.numel() * p.element_size() for p in model.parameters()))
"""


def test_a_cuda_load_streams_to_the_device_and_moves_nothing_afterwards(monkeypatch, tmp_path):
    """The model comes back from `from_pretrained` with `device_map` set to the device, and
    `load_target` does not move it again (a CPU torch would fail at `.to("cuda")`)."""
    asked = {}
    tiny = AutoModelForCausalLM.from_config(tiny_config("llama"))

    def from_pretrained(where, **kwargs):
        asked.update(kwargs)
        return tiny
    monkeypatch.setattr(models, "check_device", lambda device: device)
    monkeypatch.setattr(models.AutoTokenizer, "from_pretrained", lambda where: None)
    monkeypatch.setattr(models.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    (tmp_path / "config.json").write_text("{}")
    target = load_target(str(tmp_path), dtype="bf16", device="cuda", pack=False)
    assert asked == {"dtype": torch.bfloat16, "attn_implementation": "sdpa", "device_map": "cuda"}
    assert target.model is tiny and not tiny.training
    assert "device_map" not in load_kwargs("fp32", "cpu")


def test_a_sharded_checkpoint_loads_without_reading_it_into_host_memory(tmp_path):
    torch.manual_seed(0)
    config = tiny_config("llama", vocab_size=8192, hidden_size=512, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=8, intermediate_size=2048)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(tmp_path, max_shard_size="10MB")
    assert len(list(tmp_path.glob("*.safetensors"))) >= 4
    out = subprocess.run([sys.executable, "-c", PEAK, str(tmp_path)], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout.split()
    peak, size = int(out[0]), int(out[1])
    assert size > 60e6 and peak < 0.5 * size
