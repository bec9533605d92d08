# Run D, call 5 (calls 1-3 stage the GGUF; call 4 is ../2026-12-04-h200-v16k-anneal/eval_c.sh with
# EVAL_TIMEOUT=200, carrying .stage/q4 and .stage/p5; this one carries .whl only, same machine). C-17227
# (builtin:smollm2) annealed once more on fresh data: 60,000 v6 prompts of seed 31 answered at T 0.5, run C's
# schedule shape (peak 2.5e-4, cosine to 0.12) over 9,000 steps. This call generates the data (~250 s),
# teacher-forces it and compiles the step, training for what is left of ~570 s.
source benchmarks/device/env.sh >/dev/null
[ -f "$GGUF" ] || { echo "no GGUF on this machine"; exit 2; }
NAME=D SEED=31 VOCAB=8192 STEPS=9000 TB=$(( 570 - SECONDS )) bash benchmarks/results/2026-12-04-h200-v16k-anneal/train.sh
