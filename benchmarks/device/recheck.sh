# usage: bash benchmarks/device/recheck.sh 1|2|3|4|5|6   (carrying .whl and .stage/qN in calls 1-5, .whl alone in 6; back to back)
# The GPU evidence again at one commit (benchmarks/results/2026-12-06-h100-recheck/: all six calls at 87c5339 on
# 2026-12-06, with issue 15's CUDA probe; calls 1-4 at e1a874c on 2026-12-07, results/2026-12-07-h100-mla-cluster/:
# every CUDA form timed and slower, the probe no longer in call 1).
# Call 1: the MLA GPU tests and the Triton attention GPU tests;
# call 2: the kit's full tier on CUDA, flex and the small spec GPU tests; call 3: ops, DeepSeek and training GPU
# tests; call 4: the fused iteration and MTP GPU tests; call 5 (the GGUF joined from calls 1-5's
# parts): the engine's GPU tests on the real SmolLM2, then spec_iteration's speed part (plain against adaptive
# EAGLE-3: greedy bs 1 / 8 / 32 / 64 and T 0.7 top-p 0.9 at bs 1) and its S = 5 cycle costs;
# call 6: the graph-runner GPU tests (three of them on the real SmolLM2, so after call 5 joined the GGUF: in call 4
# they stopped at setup on 2026-12-06 and 2026-12-07).
source benchmarks/device/env.sh >/dev/null
PT="python -m pytest -q -p no:cacheprovider -m gpu -rf"
if [ "$1" = 1 ]; then
  # on a cold triton cache (a fresh machine) 150 / 120 s cut both on 2026-12-07 (17 and 12 tests in); warm, 48 / 87 s
  timeout 250 $PT tests/attention/test_mla_gpu.py > $OUT/t-mla.log 2>&1; tail -3 $OUT/t-mla.log
  timeout 250 $PT tests/attention/test_triton_gpu.py > $OUT/t-triton.log 2>&1; tail -3 $OUT/t-triton.log
elif [ "$1" = 2 ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
  timeout 300 python -c "import sys; from updraft.cli import main; sys.exit(main())" kit run --device cuda --jobs 6 --no-progress --json $OUT/kit.json \
    --out $OUT/attention-matrix-$gpu.md > $OUT/kit.log 2>&1; echo "kit rc $?"; tail -3 $OUT/kit.log
  timeout 150 $PT tests/attention/test_flex_gpu.py > $OUT/t-flex.log 2>&1; tail -1 $OUT/t-flex.log
  timeout 100 $PT tests/spec/test_head_pick.py tests/spec/test_last_row.py tests/spec/test_commit.py \
    tests/spec/test_ngram_device.py tests/runtime/test_side_stream.py > $OUT/t-spec-small.log 2>&1
  tail -3 $OUT/t-spec-small.log
elif [ "$1" = 3 ]; then
  timeout 330 $PT tests/ops/test_ops_gpu.py tests/ops/test_gemv_gpu.py tests/ops/test_pdl.py > $OUT/t-ops.log 2>&1
  tail -3 $OUT/t-ops.log
  timeout 200 $PT tests/models/test_deepseek_gpu.py tests/train/test_stepper.py > $OUT/t-models.log 2>&1
  tail -3 $OUT/t-models.log
elif [ "$1" = 4 ]; then
  timeout 300 $PT tests/spec/test_fused_gpu.py tests/spec/test_mtp_gpu.py > $OUT/t-fused.log 2>&1; tail -3 $OUT/t-fused.log
elif [ "$1" = 5 ]; then
  [ -f "$GGUF" ] || { echo "staged so far: $(ls /tmp/c | tr '\n' ' ')"; exit 0; }
  [ -f "$UPDRAFT_EVAL_DIR/mt_bench.jsonl" ] || { echo "no eval sets at $UPDRAFT_EVAL_DIR"; exit 2; }
  timeout 330 $PT tests/engine/test_gpu_e2e.py > $OUT/t-e2e.log 2>&1; tail -3 $OUT/t-e2e.log  # 121 s on an H100 after calls 1-4; over 200 s with a cold triton cache (2026-12-07)
  # (the speed part took ~160 s on an H100 on 2026-12-06)
  timeout 380 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive \
    --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed 2>&1 | grep -v Warn | tail -16
elif [ "$1" = 6 ]; then
  [ -f "$GGUF" ] || { echo "no GGUF yet: run calls 1-5 first (staged: $(ls /tmp/c | tr '\n' ' '))"; exit 2; }
  timeout 400 $PT tests/runtime/test_gpu_graphs.py > $OUT/t-graphs.log 2>&1; tail -3 $OUT/t-graphs.log
fi
