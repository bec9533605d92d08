# Run M's last call (the machine of its last training call, at once; ~4 min): the head /tmp/M-head (resume.sh
# leaves each call's head there) on the six eval sets, its own drafts and with the lookup assist
# (benchmarks/device/head_eval.sh), then spec / plain with it (64 mt_bench prompts x 256 tokens, adaptive S, the
# lookup assist on; n-gram on sum), as benchmarks/results/2026-12-03-h200-double-data/call7.sh measured v6e.
source benchmarks/device/env.sh >/dev/null
step=$(python -c "import json; print(json.load(open('/tmp/M-head/train_state.json'))['state']['step'])")
NAME=M$step HEAD=/tmp/M-head bash benchmarks/device/head_eval.sh
timeout 240 python benchmarks/spec_iteration.py --smollm $GGUF --head /tmp/M-head --skip-lossless --variants plain,eagle_adaptive \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out $OUT/speed 2>&1 | grep -v Warn | grep -v "^ngram" | tail -14
