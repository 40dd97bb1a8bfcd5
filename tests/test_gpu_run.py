"""`scripts/gpu_run.sh` runs every step it can (issue 49, item 4), run here with a stand-in Python
(no GPU, nothing loaded): a step made to fail (`GPU_RUN_FAIL`) and one that dies with a traceback
are recorded as failed with the last line of their stderr, a step `gpu_fit.skip_reason` turns
down is recorded as skipped with why, and every later step still runs; the summary table is
printed and written beside the results."""
import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The stand-in: answers the skip question from FAKE_SKIP, any other `-c` with 0, and logs every
# other call (a step's command); the training throughput script dies as an OOM would.
FAKE_PY = r"""#!/usr/bin/env bash
if [ "$1" = "-c" ]; then
    case "$2" in
        *"skip_reason('$FAKE_SKIP')"*) echo "no CUDA: torch sees no GPU" ;;
        *skip_reason*) echo "" ;;
        *) echo 0 ;;
    esac
    exit 0
fi
echo "$*" >> "$FAKE_LOG"
case "$*" in *gpu_train_throughput.py*)
    printf 'Traceback (most recent call last):\n  File "x.py"\ntorch.OutOfMemoryError: CUDA out of memory\n\n' >&2
    exit 1 ;;
esac
echo "a step's output"
"""


def test_a_failed_step_does_not_stop_the_later_ones_and_the_summary_says_why(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PY)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out, log = tmp_path / "gpu", tmp_path / "calls.txt"
    env = {**os.environ, "PY": str(fake), "OUT": str(out), "FAKE_LOG": str(log),
           "GPU_RUN_FAIL": "cost_curve_135m", "FAKE_SKIP": "bench_135m", "REGEN_N": "3"}
    run = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_run.sh")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    summary = (out / "gpu_run_summary.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:]
            for line in summary.splitlines()[2:]}
    assert list(rows) == ["sampling_tests", "cost_curve_135m", "cost_curve_7b",
                          "train_throughput_7b", "bench_135m", "regenerate"]
    assert [r[0] for r in rows.values()] == ["ok", "failed", "ok", "failed", "skipped", "ok"]
    assert rows["cost_curve_135m"][2].startswith("made to fail on purpose (GPU_RUN_FAIL=cost_curve_135m)")
    assert rows["train_throughput_7b"][2].startswith("torch.OutOfMemoryError: CUDA out of memory")
    assert rows["bench_135m"][2].startswith("no CUDA: torch sees no GPU")
    assert summary in run.stdout
    calls = log.read_text()
    assert "profile-target --model random:vicuna-7b" in calls and "regenerate" in calls
    assert "bench" not in calls and "--out " + str(out / "cost_curve_smollm2-135m_cuda.json") not in calls
    assert (out / "gpu_run_steps.txt").read_text().count(" s\n") == 5   # the steps that ran
