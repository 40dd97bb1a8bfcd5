#!/usr/bin/env bash
# One GPU, one prepared run: the figures the course shows for a GPU.
#   0. the lossless-sampling tests (exact enumeration, chi-square) with every draw on the GPU;
#   1. the embedded target's verification cost curve on the GPU (fp32, as on the CPU);
#   2. the cost curve and draft-head cost of a random-weight Vicuna-7B-shaped model in bf16
#      (built directly on the GPU: no download), for the projected 7B speedup of notebook 06;
#   3. the benchmark on the embedded target with the shipped head;
#   4. ShareGPT train conversations with the target's own replies (training text, see below).
# Run after `make setup` (.venv) or `make gpu-setup` (the current Python, e.g. on Colab) on a machine
# with CUDA:  bash scripts/gpu_run.sh   (PY=... names another interpreter)
# Results land in data/results/gpu/ with the GPU named inside each JSON (machine.gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PY:-}" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
OUT=${OUT:-data/results/gpu}
mkdir -p "$OUT"
EAGLE_MINI_TEST_DEVICE=cuda "$PY" -m pytest -q -p no:cacheprovider tests/test_lossless_sampling.py \
    tests/test_device.py 2>&1 | tee "$OUT/sampling_tests_cuda.txt"
"$PY" -m eagle_mini profile-target --device cuda --dtype fp32 --max-n 128 \
    --out "$OUT/cost_curve_smollm2-135m_cuda.json"
"$PY" -m eagle_mini profile-target --model random:vicuna-7b --device cuda --dtype bf16 \
    --max-n 128 --with-head --out "$OUT/cost_curve_random_vicuna-7b_cuda.json"
"$PY" -m eagle_mini bench --device cuda --dtype fp32 --n "${BENCH_N:-20}" \
    --out "$OUT/bench_smollm2-135m_cuda_mtbench"
# 4. training text in the target's own words for the next CPU training round (#4): the shipped
#    head's unseen train conversations with SmolLM2's greedy replies, a few MB of JSON lines
#    (`train-head --stream --regenerated $OUT/regenerated_train.jsonl` uses it; resumable).
START=$("$PY" -c "import json; print(json.load(open('data/heads/smollm2-135m/config.json')).get('next_train_record', 0))")
"$PY" -m eagle_mini regenerate --device cuda --dtype fp32 --split train --start "$START" \
    --max-conversations "${REGEN_N:-2000}" --batch-size 64 --max-new-tokens 512 --max-len 1024 \
    --out "$OUT/regenerated_train.jsonl"
