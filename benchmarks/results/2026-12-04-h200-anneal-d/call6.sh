# Run D, call 6 (same machine, .whl only): --resume to the schedule's end (9,000 steps) or TB seconds, then D's
# own drafts on the six sets (head_eval.sh, KINDS=noassist; the engine's kernels were compiled by call 4).
source benchmarks/device/env.sh >/dev/null
[ -f "$GGUF" ] || { echo "no GGUF on this machine"; exit 2; }
NAME=D SEED=31 VOCAB=8192 STEPS=9000 TB=${TB:-400} bash benchmarks/results/2026-12-04-h200-v16k-anneal/train.sh
[ -f /tmp/D-head/config.json ] && NAME=D HEAD=/tmp/D-head KINDS=${KINDS:-noassist} bash benchmarks/device/head_eval.sh
