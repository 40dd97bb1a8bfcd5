#!/usr/bin/env bash
# One GPU, one prepared run of under 10 minutes: the figures the course shows for a GPU, each
# written as soon as its step ends (a run cut short keeps what it measured).
#   0. the lossless-sampling tests (exact enumeration, chi-square) with every draw on the GPU;
#   1. the embedded target's verification cost curve on the GPU (fp32, as on the CPU);
#   2. the cost curve and draft-head cost of a random-weight Vicuna-7B-shaped model in bf16 (built
#      directly on the GPU: no download) with exact verification (runtime/exact.py) where its
#      self-check passes, the stock forward timed beside it: notebook 06b's 7B curve;
#   3. EAGLE-3 training throughput at the Vicuna-7B shape (random weights, scripts/gpu_train_throughput.py);
#   4. the benchmark on the embedded target with the shipped heads (notebook 06b, appendix F);
#   5. only with REGEN_N set: ShareGPT train conversations with the target's own replies (the
#      training text of the next CPU round, see below; it takes longer than the rest).
# Run after `make setup` (.venv) or `make gpu-setup` (the current Python, e.g. on Colab) on a machine
# with CUDA:  bash scripts/gpu_run.sh   (PY=... names another interpreter)
# Results land in data/results/gpu/ with the GPU named inside each JSON (machine.gpu); each step's
# time goes to data/results/gpu/gpu_run_steps.txt.
# Every step runs on its own: one that fails does not stop the next. Each records ok, failed (the
# last line of its stderr) or skipped (why: no CUDA, no bf16 units, not enough free GPU memory for
# its plan; eagle_mini/course/gpu_fit.py's skip_reason), and the run ends with a summary table,
# printed and written to data/results/gpu/gpu_run_summary.md (each step's stderr beside it, in
# logs/); it exits 1 when a step failed. GPU_RUN_FAIL=STEP makes STEP fail on purpose
# (tests/test_gpu_run.py checks that the later steps still run).
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
OUT=${OUT:-data/results/gpu}
mkdir -p "$OUT/logs"
STEPS="$OUT/gpu_run_steps.txt"
SUMMARY="$OUT/gpu_run_summary.md"
: > "$STEPS"
ROWS=()
step() {   # step NAME COMMAND...: run it unless gpu_fit says why not; record ok / failed / skipped
    local name=$1 start=$SECONDS err="$OUT/logs/$1.stderr" why rc
    shift
    why=$("$PY" -c "from eagle_mini.course.gpu_fit import skip_reason; print(skip_reason('$name'))" \
          2>/dev/null | tail -n 1)
    if [ -n "$why" ]; then
        echo "== $name: skipped ($why)"
        ROWS+=("| $name | skipped | - | $why |")
        return
    fi
    echo "== $name: $*"
    if [ "${GPU_RUN_FAIL:-}" = "$name" ]; then
        set -- bash -c 'echo "made to fail on purpose (GPU_RUN_FAIL=$0)" >&2; exit 1' "$name"
    fi
    { "$@" 2>&1 1>&3 3>&- | tee "$err" >&2; } 3>&1
    rc=${PIPESTATUS[0]}
    echo "$name: $((SECONDS - start)) s" | tee -a "$STEPS"
    if [ "$rc" -eq 0 ]; then
        ROWS+=("| $name | ok | $((SECONDS - start)) | |")
    else
        why=$(grep -v '^[[:space:]]*$' "$err" | tail -n 1 | tr '|' '/')
        ROWS+=("| $name | failed | $((SECONDS - start)) | ${why:-exit status $rc} |")
    fi
}
step sampling_tests bash -c "EAGLE_MINI_TEST_DEVICE=cuda '$PY' -m pytest -q -p no:cacheprovider \
    tests/test_lossless_sampling.py tests/test_device.py 2>&1 | tee '$OUT/sampling_tests_cuda.txt' >&2; \
    exit \${PIPESTATUS[0]}"
step cost_curve_135m "$PY" -m eagle_mini profile-target --device cuda --dtype fp32 --max-n 128 \
    --out "$OUT/cost_curve_smollm2-135m_cuda.json"
step cost_curve_7b "$PY" -m eagle_mini profile-target --model random:vicuna-7b --device cuda \
    --dtype bf16 --exact on --compare-exact --max-n 128 --with-head \
    --out "$OUT/cost_curve_random_vicuna-7b_cuda.json"
step train_throughput_7b "$PY" scripts/gpu_train_throughput.py --config vicuna-7b --device cuda \
    --out "$OUT/train_throughput_eagle3_random_vicuna-7b_cuda.json"
step bench_135m "$PY" -m eagle_mini bench --device cuda --dtype fp32 --n "${BENCH_N:-10}" \
    --out "$OUT/bench_smollm2-135m_cuda_mtbench"
# 5. training text in the target's own words for the next CPU training round (#4): the shipped
#    head's unseen train conversations with SmolLM2's greedy replies, a few MB of JSON lines
#    (`train-head --stream --regenerated $OUT/regenerated_train.jsonl` uses it; resumable).
if [ -n "${REGEN_N:-}" ]; then
    START=$("$PY" -c "import json; print(json.load(open('data/heads/smollm2-135m/config.json')).get('next_train_record', 0))")
    step regenerate "$PY" -m eagle_mini regenerate --device cuda --dtype fp32 --split train \
        --start "$START" --max-conversations "$REGEN_N" --batch-size 64 --max-new-tokens 512 \
        --max-len 1024 --out "$OUT/regenerated_train.jsonl"
fi
{
    echo "| step | status | seconds | why |"
    echo "|---|---|---|---|"
    printf '%s\n' "${ROWS[@]}"
} > "$SUMMARY"
echo
cat "$SUMMARY"
case "${ROWS[*]}" in *"| failed |"*) exit 1 ;; esac   # skipped steps are not failures
