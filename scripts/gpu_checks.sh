#!/usr/bin/env bash
# The checks that need a CUDA device, as one run on a lent GPU machine (docs/ci.md):
#
#   bash scripts/gpu_checks.sh OUTDIR
#
# 1. the CUDA tests: the decode step's CUDA graphs, bf16 training's attention, half dtypes under
#    autocast, every spec's compiled session on CUDA and the 30-call graph count there;
# 2. beside them, sessions of random specs on CUDA for SAMPLE_S seconds in SAMPLES processes;
# 3. then, alone on the GPU, bench_compile.py on CUDA: the data behind compile_units' CUDA row and
#    the decode step's figures (--decode), and bench_first.py's rows (first token, first step) there.
# 4. bench_tensor_parallel.py on CUDA with NCCL, one GPU a rank: tp = 1, 2, 4 as far as the GPUs go
#    (a tp above the GPU count is skipped, and said so).
# The machine's own torch runs it. Its image has no lark: carry its wheel in .whl/ (here:
# `python3 -m pip download --no-deps lark==1.3.1 -d .whl`), installed below into a temporary folder.
# Each step has its own time limit.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?give an output folder}
mkdir -p "$out"
PY=${PY:-python3}
SAMPLES=${SAMPLES:-4} SAMPLE_S=${SAMPLE_S:-200} SEED0=${SEED0:-40000}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-2}
if ! $PY -c "import lark" 2>/dev/null; then
    site=$(mktemp -d)
    $PY -m pip install -q --no-index --no-deps --target "$site" .whl/lark-*.whl ||
        { echo "no lark here: carry its wheel in .whl/ (see the top of this script)"; exit 1; }
    PYTHONPATH=$PYTHONPATH:$site
fi
nvidia-smi -L
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
for ((i = 0; i < SAMPLES; i++)); do
    timeout $((SAMPLE_S + 120)) $PY scripts/session_sample.py --device cuda --seed0 $((SEED0 + 1000 * i)) \
        --seconds "$SAMPLE_S" > "$out/sample_$i.log" 2>&1 &
done
timeout -s INT "${TESTS_S:-330}" $PY -m pytest -q -s -rs -p no:cacheprovider -n "${WORKERS:-8}" -k cuda \
    tests/test_device_paths.py tests/test_runtime.py tests/property/test_session.py 2>&1 | tee "$out/tests.log"
wait
tail -n 1 "$out"/sample_*.log
grep -h "a session broke" "$out"/sample_*.log
timeout -s INT "${BENCH_S:-200}" $PY benchmarks/bench_compile.py --device cuda --reps 5 --compile-layers 1,4,12 \
    2>&1 | tee "$out/bench_compile.log"
timeout -s INT "${DECODE_S:-150}" $PY benchmarks/bench_compile.py --device cuda --decode "nanogpt 4x256" gpt2-small \
    2>&1 | tee "$out/bench_decode.log"
timeout -s INT "${FIRST_S:-300}" $PY benchmarks/bench_first.py --device cuda --configs nanogpt-2x64 gpt2-small \
    2>&1 | tee "$out/bench_first.log"
timeout -s INT "${TP_S:-300}" $PY benchmarks/bench_tensor_parallel.py --device cuda --backend nccl \
    2>&1 | tee "$out/bench_tensor_parallel.log"
