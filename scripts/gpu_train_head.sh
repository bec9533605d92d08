#!/usr/bin/env bash
# Train the draft head shipped for SmolLM2-135M-Instruct on one GPU over several device calls of
# at most 10 minutes each, on machines that may be handed back between calls (losing /tmp), then
# evaluate it on the six EAGLE evaluation sets.
#
#   RUN=first  EVAL=0 bash scripts/gpu_train_head.sh
#       generate the data (from the seed), start the schedule (planned for TRAIN_SECONDS of
#       training in all), train for the rest of TRAIN_BUDGET; $OUT/head holds what the next run
#       needs (below).
#   RUN=resume RESUME_FROM=<a copy of the last run's $OUT/head> EVAL=0 bash scripts/gpu_train_head.sh
#       (as many times as TRAIN_SECONDS needs) continue the same schedule: on the machine that
#       ran the last run (its checkpoint still in $WORK) with --resume (exact: optimizer state
#       too); on a fresh machine with --resume-from RESUME_FROM (the data is regenerated from the
#       seed, the weights, step, LR schedule, position in the data and logs come from the head
#       folder, the optimizer restarts, re-warmed over 50 steps).
#   RUN=resume RESUME_FROM=... EVAL=1 bash scripts/gpu_train_head.sh
#       the last one: train, then the evaluation.
#   RUN=init INIT_FROM=<head folder>   the weights of any head, with a new schedule.
#   EVAL_ONLY=1 HEAD=<head folder>     only the evaluation of that head (no training).
# METHOD=eagle (EAGLE-1) or eagle3 (default). PROMPT_SET=v3 (default, the shipped head's recipe),
# v4 (v3 + self-instruct prompts), v5 (v3 + 40% long first-turn requests with constraints) or v6
# (v5 + half free user turns: the target writes the user's turn itself);
# every call of one schedule must pass the same set.
# BATCH_TOKENS=16384 (default, every shipped run's): padded tokens a training batch; every call of one
# schedule must pass the same. EXTRA_TRAIN_ARGS="--compile" compiles the head's forward (see train-draft --help).
# DRAFT_VOCAB=8192 (default, the shipped head's): the EAGLE-3 draft vocabulary; every call of one
# schedule must pass the same size. RUN=init with EXTRA_TRAIN_ARGS="--resize-draft-vocab" grows
# (or shrinks) the INIT_FROM head's vocabulary to DRAFT_VOCAB, its tokens first. A head with a
# weight file over 15 MiB comes back as weights.tar.part-NN (32,000 tokens: ~47 MB, 4 parts; join
# with `cat weights.tar.part-* | tar xf -`); that is 8 files with the logs, so run the evaluation
# in its own call (EVAL=0, then EVAL_ONLY=1 HEAD=$WORK/head on the same machine).
#
# What comes back (the device tool returns at most 8 files of at most 16 MiB): $OUT/head/
# config.json, model-00001-of-00002.safetensors, model-00002-of-00002.safetensors (the bf16 head,
# split at 15 MiB), train_state.json (schedule state), train_log.json (the logs of every run so
# far); $OUT/run.log (training + evaluation output + summary); with EVAL=1 also
# $OUT/eval/eval_acceptance.json and $OUT/eval/per_position.png. That is 6 or 8 files. To ship:
# `python -m updraft.train.heads merge DIR` joins the shards into one model.safetensors.
#
# Needs: the GGUF at $UPDRAFT_CACHE/SmolLM2-135M-Instruct.Q4_1.gguf, updraft importable
# (PYTHONPATH=repo root), gguf installed; matplotlib is optional (without it there is no PNG:
# redraw it with `python benchmarks/eval_acceptance.py --plot OUT/eval/eval_acceptance.json`).
#
# TINY=1: a CPU dry run of the same pipeline with everything shrunk (scripts/tiny_recipe.sh runs
# first -> resume on a "new machine" -> eval with it).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-head-out}
PY=${PYTHON:-python}
CACHE=${UPDRAFT_CACHE:-$HOME/.cache/updraft}
GGUF="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
WORK=${WORK:-/tmp/updraft-gpu-head}   # checkpoint + data cache (large; not copied back)
mkdir -p "$OUT" "$WORK"
LOG="$OUT/run.log"
: > "$LOG"

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
if [ "${EVAL:-1}" != "0" ] && [ ! -f "$EVAL_DIR/mt_bench.jsonl" ]; then
  echo "WARNING: no eval sets at $EVAL_DIR (set UPDRAFT_EVAL_DIR): the evaluation will fail" >&2
fi

if [ "${TINY:-0}" = "1" ]; then
  TRAIN_BUDGET=${TRAIN_BUDGET:-300}
  EVAL_TIMEOUT=${EVAL_TIMEOUT:-400}
  TOTAL_LIMIT=${TOTAL_LIMIT:-900}   # a shared 2-core machine is slow: no 10-minute device limit here
  TRAIN_ARGS=(--device cpu --num-prompts "${NUM_PROMPTS:-40}" --held-out 4 --max-new-tokens 24 --gen-batch 16
              --batch-tokens 1024 --eval-every 20 --log-every 5 --checkpoint-every 20 --gen-fraction 0.6
              --final-eval-prompts 1 --final-eval-tokens 16 --warmup-steps 5 --rewarm-steps 5 --draft-vocab-size 8192
              --train-seconds "${TRAIN_SECONDS:-60}")
  EVAL_ARGS=(--device cpu --limit default=2 --max-tokens 24 --speed-prompts 1 --accept-batch 2)
else
  TRAIN_BUDGET=${TRAIN_BUDGET:-540}
  EVAL_TIMEOUT=${EVAL_TIMEOUT:-200}
  # 20,000 prompts of the v3 set: ~24.8k sequences, ~7.0M generated tokens (~10.8M with the
  # prompts: news summaries carry their article; from an 80-prompt sample: 352 generated and 540
  # in all per prompt) in ~1.8 min at 65k tok/s; features ~50 GB, on the GPU when they fit with
  # 20 GiB to spare, else in host memory (--data-device).
  TRAIN_ARGS=(--num-prompts "${NUM_PROMPTS:-20000}" --held-out 64 --max-new-tokens 320 --gen-batch "${GEN_BATCH:-512}"
              --gen-fraction 0.6 --gen-max-total-tokens "${GEN_KV:-524288}" --batch-tokens "${BATCH_TOKENS:-16384}" --eval-every 500
              --log-every 50 --checkpoint-every 500 --final-eval-prompts 16 --final-eval-tokens 192
              --draft-vocab-size "${DRAFT_VOCAB:-8192}")
  # STEPS=N fixes the schedule's length (to repeat a run's schedule exactly), else it is planned
  # from the measured step time to fill TRAIN_SECONDS of training across the calls.
  if [ -n "${STEPS:-}" ]; then TRAIN_ARGS+=(--steps "$STEPS"); else TRAIN_ARGS+=(--train-seconds "${TRAIN_SECONDS:-1500}"); fi
  EVAL_ARGS=(--limit mt_bench=80,default=20 --max-tokens 256 --speed-prompts 5 --accept-batch 16
             --max-total-tokens 65536)
fi

METHOD=${METHOD:-eagle3}
start=$(date +%s)
train_rc=0
HEAD_DIR="$WORK/head"
if [ "${EVAL_ONLY:-0}" = "1" ]; then
  HEAD_DIR=${HEAD:?EVAL_ONLY=1 needs HEAD=<head folder>}
else
  case "${RUN:-first}" in
    first) rm -rf "$WORK/head"; RUN_ARGS=() ;;
    resume)
      if [ -f "$WORK/head/checkpoint/state.pt" ] && [ -f "$WORK/data/sequences.safetensors" ]; then
        RUN_ARGS=(--resume)   # the same machine: the exact checkpoint
      else
        RUN_ARGS=(--resume-from "${RESUME_FROM:?RUN=resume on a fresh machine needs RESUME_FROM=<the head folder the last run brought back>}")
        rm -rf "$WORK/head"
      fi ;;
    init) RUN_ARGS=(--init-from "${INIT_FROM:?RUN=init needs INIT_FROM=<head folder>}"); rm -rf "$WORK/head" ;;
    *) echo "RUN=${RUN} is not one of first, resume, init" >&2; exit 2 ;;
  esac
  echo "== $(date -u +%FT%TZ) train-draft ${METHOD} RUN=${RUN:-first} ${RUN_ARGS[*]} (budget ${TRAIN_BUDGET}s) ==" | tee -a "$LOG"
  # The trainer keeps its own budget; the timeout is only a backstop (on SIGINT the trainer stops
  # and still saves the head).
  timeout --signal=INT --kill-after=15 $((TRAIN_BUDGET + 40)) \
    "$PY" -m updraft.train.cli --target "$GGUF" --out "$WORK/head" --data-dir "$WORK/data" \
      --method "$METHOD" --prompt-set "${PROMPT_SET:-v3}" --ttt-steps 5 --spec-steps 5 --time-budget "$TRAIN_BUDGET" --no-progress \
      "${TRAIN_ARGS[@]}" "${RUN_ARGS[@]}" ${EXTRA_TRAIN_ARGS:-} 2>&1 | tee -a "$LOG"
  train_rc=${PIPESTATUS[0]}
  echo "train-draft exit status $train_rc after $(( $(date +%s) - start ))s" | tee -a "$LOG"
  rm -rf "$OUT/head"
  mkdir -p "$OUT/head"
  for f in "$WORK"/head/config.json "$WORK"/head/model*.safetensors "$WORK"/head/train_state.json "$WORK"/head/train_log.json; do
    [ -f "$f" ] && cp "$f" "$OUT/head/"
  done
  # A weight file over the tool's 16 MiB (one tensor alone: a 32,000-token LM head is 37 MB of
  # bf16) cannot come back whole: then every weight file goes into one tar cut at 15 MB.
  if [ -n "$(find "$OUT/head" -name 'model*.safetensors' -size +15M)" ]; then
    (cd "$OUT/head" && tar cf - model*.safetensors | split -b 15000000 -d - weights.tar.part- && rm model*.safetensors)
    echo "weights in $OUT/head/weights.tar.part-*: join with  cat weights.tar.part-* | tar xf -" | tee -a "$LOG"
  fi
  if [ -z "$(find "$OUT/head" -name 'model*.safetensors' -o -name 'weights.tar.part-*')" ]; then
    echo "no head was written (exit status $train_rc); see run.log" >&2
    exit 1
  fi
fi

# Whatever training took, the whole script ends by TOTAL_LIMIT seconds.
left=$(( ${TOTAL_LIMIT:-570} - ($(date +%s) - start) ))
[ "$left" -lt "$EVAL_TIMEOUT" ] && EVAL_TIMEOUT=$left
[ "${EVAL:-1}" = "0" ] && EVAL_TIMEOUT=0
if [ "$EVAL_TIMEOUT" -ge 20 ]; then
  # WAIT_FOR=FILE: another GPU job started before this script touches FILE when done; the bs-1
  # timings below must not share the GPU with it (waits at most WAIT_MAX s).
  if [ -n "${WAIT_FOR:-}" ]; then
    for _ in $(seq 1 "${WAIT_MAX:-90}"); do [ -f "$WAIT_FOR" ] && break; sleep 1; done
    [ -f "$WAIT_FOR" ] || echo "warning: $WAIT_FOR not there after ${WAIT_MAX:-90}s: timings may share the GPU"
  fi
  echo "== $(date -u +%FT%TZ) eval_acceptance (timeout ${EVAL_TIMEOUT}s) ==" | tee -a "$LOG"
  timeout --signal=INT --kill-after=10 "$EVAL_TIMEOUT" \
    "$PY" benchmarks/eval_acceptance.py --model "$GGUF" --head "$HEAD_DIR" --num-steps 5 \
      --out "$OUT/eval" "${EVAL_ARGS[@]}" 2>&1 | tee -a "$LOG"
  eval_rc=${PIPESTATUS[0]}
elif [ "${EVAL:-1}" = "0" ]; then
  echo "evaluation skipped (EVAL=0)" | tee -a "$LOG"
  eval_rc=0
else
  echo "no time left for the evaluation (${EVAL_TIMEOUT}s)" | tee -a "$LOG"
  eval_rc=124
fi

{
  echo "== summary: total $(( $(date +%s) - start ))s; train-draft exit $train_rc, eval exit $eval_rc"
  "$PY" scripts/head_summary.py "$HEAD_DIR" "$OUT/eval"
} 2>&1 | tee -a "$LOG"
exit $(( train_rc != 0 || eval_rc != 0 ))
