#!/usr/bin/env bash
# Train the draft head shipped for SmolLM2-135M-Instruct on one GPU, then evaluate it on the six
# EAGLE evaluation sets -- each command ends well inside 600 s (training ~TRAIN_BUDGET s
# including data generation, evaluation bounded by EVAL_TIMEOUT s).
#
# One schedule spread over several such runs (each at most 10 minutes; the checkpoint and the
# data cache live in $WORK, which survives between runs on the same machine):
#   RUN=first  EVAL=0 bash scripts/gpu_train_head.sh   # generate the data, start the schedule
#   RUN=resume EVAL=0 bash scripts/gpu_train_head.sh   # as many times as TRAIN_SECONDS needs
#   RUN=resume EVAL=1 bash scripts/gpu_train_head.sh   # the last one, then the evaluation
# The whole schedule (LR decay included) is planned for TRAIN_SECONDS of training in all. If the
# machine (and $WORK) was lost between runs: the data is regenerated exactly from the seed
# (greedy, not cut by the deadline), and RUN=init INIT_FROM=<the head a run brought back>
# continues from that head's weights with a fresh optimizer.
# METHOD=eagle (EAGLE-1, the earlier head) or eagle3 (default).
#
# Needs: the GGUF at $UPDRAFT_CACHE/SmolLM2-135M-Instruct.Q4_1.gguf, updraft importable
# (PYTHONPATH=repo root), gguf installed; matplotlib is optional (without it there is no PNG:
# redraw it with `python benchmarks/eval_acceptance.py --plot OUT/eval/eval_acceptance.json`).
#
# Results under $OUT (default ./gpu-head-out):
#   head/                  config.json, model.safetensors (bf16), README.md, train_log.json
#                          -> copy into updraft/heads/smollm2-135m-instruct-eagle/
#   train.log, eval.log    the two commands' output
#   eval/                  eval_acceptance.json (+ per_position.png with matplotlib)
#   summary.txt            the numbers that matter
#
# TINY=1: a CPU dry run of the same pipeline with everything shrunk (about 3-4 minutes).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-head-out}
PY=${PYTHON:-python}
CACHE=${UPDRAFT_CACHE:-$HOME/.cache/updraft}
GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
WORK=${WORK:-/tmp/updraft-gpu-head}   # checkpoint + data cache (large; not copied back)
mkdir -p "$OUT" "$WORK"

if [ ! -f "$GGUF" ]; then
  echo "missing $GGUF (set UPDRAFT_CACHE to the folder that holds it)" >&2
  exit 2
fi
# The eval sets (read in place, never part of the repo): $UPDRAFT_EVAL_DIR, else ../shared/data/eagle-eval
# beside the checkout, else a copy staged for the device call in an ignored .stage/*/eagle-eval.
if [ -z "${UPDRAFT_EVAL_DIR:-}" ] && [ ! -f ../shared/data/eagle-eval/mt_bench.jsonl ]; then
  for d in .stage/*/eagle-eval; do
    [ -f "$d/mt_bench.jsonl" ] && export UPDRAFT_EVAL_DIR="$PWD/$d" && break
  done
fi
EVAL_DIR=${UPDRAFT_EVAL_DIR:-../shared/data/eagle-eval}
if [ ! -f "$EVAL_DIR/mt_bench.jsonl" ]; then
  echo "WARNING: no eval sets at $EVAL_DIR (set UPDRAFT_EVAL_DIR): the head is trained, the evaluation will fail" >&2
fi

if [ "${TINY:-0}" = "1" ]; then
  TRAIN_BUDGET=${TRAIN_BUDGET:-100}
  EVAL_TIMEOUT=${EVAL_TIMEOUT:-240}
  TRAIN_ARGS=(--device cpu --num-prompts 600 --held-out 6 --max-new-tokens 48 --gen-batch 16
              --batch-tokens 1024 --eval-every 20 --log-every 5 --checkpoint-every 20
              --final-eval-prompts 2 --final-eval-tokens 24 --warmup-steps 5)
  EVAL_ARGS=(--device cpu --limit default=2 --max-tokens 24 --speed-prompts 1 --accept-batch 2)
else
  TRAIN_BUDGET=${TRAIN_BUDGET:-320}
  EVAL_TIMEOUT=${EVAL_TIMEOUT:-200}
  TRAIN_ARGS=(--num-prompts 14000 --held-out 64 --max-new-tokens 320 --gen-batch 384 --gen-fraction 0.5
              --gen-max-total-tokens 393216 --batch-tokens 16384 --eval-every 500 --log-every 50
              --checkpoint-every 500 --final-eval-prompts 16 --final-eval-tokens 192 --draft-vocab-size 8192
              --train-seconds "${TRAIN_SECONDS:-1200}")
  EVAL_ARGS=(--limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 5 --accept-batch 16
             --max-total-tokens 65536)
fi

METHOD=${METHOD:-eagle3}
case "${RUN:-first}" in
  first) rm -rf "$WORK/head"; RUN_ARGS=() ;;
  resume) RUN_ARGS=(--resume) ;;
  init) RUN_ARGS=(--init-from "${INIT_FROM:?RUN=init needs INIT_FROM=<head folder>}"); rm -rf "$WORK/head" ;;
  *) echo "RUN=${RUN} is not one of first, resume, init" >&2; exit 2 ;;
esac
echo "== $(date -u +%FT%TZ) train-draft ${METHOD} RUN=${RUN:-first} (budget ${TRAIN_BUDGET}s) =="
start=$(date +%s)
# The trainer keeps its own budget; the timeout is only a backstop (on SIGINT the trainer stops
# and still saves the head).
timeout --signal=INT --kill-after=15 $((TRAIN_BUDGET + 40)) \
  "$PY" -m updraft.train.cli --target "$GGUF" --out "$WORK/head" --data-dir "$WORK/data" \
    --method "$METHOD" --ttt-steps 5 --spec-steps 5 --time-budget "$TRAIN_BUDGET" --no-progress \
    "${TRAIN_ARGS[@]}" "${RUN_ARGS[@]}" ${EXTRA_TRAIN_ARGS:-} 2>&1 | tee "$OUT/train.log"
train_rc=${PIPESTATUS[0]}
echo "train-draft exit status $train_rc after $(( $(date +%s) - start ))s"
mkdir -p "$OUT/head"
for f in config.json model.safetensors README.md train_log.json; do
  [ -f "$WORK/head/$f" ] && cp "$WORK/head/$f" "$OUT/head/"
done
if [ ! -f "$OUT/head/model.safetensors" ]; then
  echo "no head was written (exit status $train_rc); see train.log" >&2
  exit 1
fi

# Whatever training took, the whole script ends by TOTAL_LIMIT seconds.
left=$(( ${TOTAL_LIMIT:-560} - ($(date +%s) - start) ))
[ "$left" -lt "$EVAL_TIMEOUT" ] && EVAL_TIMEOUT=$left
[ "${EVAL:-1}" = "0" ] && EVAL_TIMEOUT=0
if [ "$EVAL_TIMEOUT" -ge 20 ]; then
  # WAIT_FOR=FILE: another GPU job started before this script (e.g. the kit matrix) touches FILE
# when done; the bs-1 timings below must not share the GPU with it (waits at most WAIT_MAX s).
if [ -n "${WAIT_FOR:-}" ]; then
  for _ in $(seq 1 "${WAIT_MAX:-90}"); do [ -f "$WAIT_FOR" ] && break; sleep 1; done
  [ -f "$WAIT_FOR" ] || echo "warning: $WAIT_FOR not there after ${WAIT_MAX:-90}s: timings may share the GPU"
fi

echo "== $(date -u +%FT%TZ) eval_acceptance (timeout ${EVAL_TIMEOUT}s) =="
  timeout --signal=INT --kill-after=10 "$EVAL_TIMEOUT" \
    "$PY" benchmarks/eval_acceptance.py --model "$GGUF" --head "$OUT/head" --num-steps 5 \
      --out "$OUT/eval" "${EVAL_ARGS[@]}" 2>&1 | tee "$OUT/eval.log"
  eval_rc=${PIPESTATUS[0]}
elif [ "${EVAL:-1}" = "0" ]; then
  echo "evaluation skipped (EVAL=0)" | tee "$OUT/eval.log"
  eval_rc=0
else
  echo "no time left for the evaluation (${EVAL_TIMEOUT}s)" | tee "$OUT/eval.log"
  eval_rc=124
fi

{
  echo "total $(( $(date +%s) - start ))s; train-draft exit $train_rc, eval exit $eval_rc"
  "$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
log = json.loads((out / "head" / "train_log.json").read_text())
d, g = log["data"]["train"], log["data"]["generation"]
print(f"device {log['device']}, torch {log['torch']}, precision {log['precision']}")
print(f"data: {int(d['sequences'])} seqs, {int(d['tokens'])} tokens; generation {g.get('generated_tokens', 0):.0f} tokens "
      f"in {g.get('wall_s', 0):.0f}s ({g.get('tokens_per_s', 0):.0f} tok/s); teacher forcing {log['data']['teacher_forcing_s']:.1f}s")
print(f"training: {log['steps']}/{log['total_steps']} steps ({log['epochs_seen']:.2f} epochs) in {log['train_s']:.0f}s this run, "
      f"stopped by {log['stopped_by']}; {log.get('tokens_seen', 0) / 1e6:.1f}M positions seen, "
      f"{log.get('train_tokens_per_s', 0) / 1e3:.0f}k positions/s; draft vocab coverage {log['data'].get('draft_vocab_coverage')}")
f = log["held_out_final"]
print(f"held-out per-step acc {[round(a, 3) for a in f['acc']]} -> expected accept length {f['expected_accept_length']:.2f}")
e = log.get("engine_acceptance")
if e:
    print(f"engine, {e['prompts']} held-out prompts: accept length {e['mean_accept_length']:.2f}, per position {[round(x, 3) for x in e['per_position']]}")
p = out / "eval" / "eval_acceptance.json"
if p.is_file():
    r = json.loads(p.read_text())
    for name, s in r["sets"].items():
        sp = s.get("speed_bs1")
        extra = f"; bs1 {sp['spec_tok_s']:.0f} vs {sp['base_tok_s']:.0f} tok/s = {sp['speedup']:.2f}x (decode {sp['decode_speedup']:.2f}x), equal {s['outputs_equal']}/{s['outputs_compared']}" if sp else ""
        print(f"{name:10s} n={s['prompts']:3d} accept length {s['mean_accept_length']:.2f} per position {[round(x, 2) for x in s['per_position']]}{extra}")
else:
    print("no eval_acceptance.json (eval failed or timed out; see eval.log)")
EOF
} 2>&1 | tee "$OUT/summary.txt"
exit $(( train_rc != 0 || eval_rc != 0 ))
