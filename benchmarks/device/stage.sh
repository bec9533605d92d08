# usage: [BASE=<commit>] bash benchmarks/device/stage.sh [RUN_DIR]
# Rebuilds what device calls carry from this machine's caches, in a checkout that has none of its ignored files
# (they do not survive between sessions here, and ~/.cache/updraft did not either on 2026-12-04: what a later
# session must have, a run's train_state.json, logs and weights, goes into the repository, the weights into git
# history only): .whl/ (the gguf wheel the device machine lacks, downloaded), .stage/q1-q5 (the default GGUF's xz
# stream, `xz -6`, in five parts of ~18.1 MB: one beside the ~41 MiB tree fits a call's 64 MiB, where a fourth of
# it, 22.6 MB with the eval sets, no longer did on 2026-12-07;
# benchmarks/device/env.sh joins them) and, with RUN_DIR (a run kept outside the checkout, e.g.
# ~/.cache/updraft/runs/M: its newest head-*/ folder and seq.xz.part-* from data_pack.sh), .stage/p4/<run>-head (the
# head, ~20 MB) and .stage/p5 (the sequences' parts and the eval sets, read in place from $UPDRAFT_EVAL_DIR, else
# ../shared/data/eagle-eval). Prints each folder's size and the joined GGUF's sha256 prefix (b179c9523d0e6a0f).
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=${UPDRAFT_CACHE:-$HOME/.cache/updraft}
GGUF=$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$GGUF" ] || { echo "no GGUF at $GGUF (run any updraft command with the default model once)" >&2; exit 2; }
if ! ls .whl/gguf-*.whl >/dev/null 2>&1; then
  mkdir -p .whl && python -m pip download -q --no-deps gguf==0.19.0 -d .whl
fi
if [ ! -f .stage/q5/gguf.xz.part.ae ]; then
  rm -rf .stage/q1 .stage/q2 .stage/q3 .stage/q4 .stage/q5 && mkdir -p .stage/xz
  xz -T0 -6 -c "$GGUF" > .stage/xz/g.xz && split -n 5 -a 2 .stage/xz/g.xz .stage/xz/gguf.xz.part. && rm .stage/xz/g.xz
  i=1; for p in aa ab ac ad ae; do mkdir -p .stage/q$i && mv .stage/xz/gguf.xz.part.$p .stage/q$i/; i=$((i + 1)); done
  rmdir .stage/xz
fi
# the eval sets (0.5 MB) beside the last part: the call that joins the GGUF can evaluate (context_speed.sh)
[ -d .stage/q5/eagle-eval ] || cp -r "${UPDRAFT_EVAL_DIR:-../shared/data/eagle-eval}" .stage/q5/eagle-eval
echo "GGUF from the parts: $(cat .stage/q?/gguf.xz.part.a? | xz -dc | sha256sum | cut -c1-16)"
if [ -n "${1:-}" ]; then
  head=$(ls -d "$1"/head-* | sort -t- -k2 -n | tail -1)
  rm -rf .stage/p4 .stage/p5 && mkdir -p .stage/p4 .stage/p5
  cp -r "$head" .stage/p4/"$(basename "$1")"-head && chmod -R u+w .stage/p4
  cp "$1"/seq.xz.part-* .stage/p5/ && cp -r "${UPDRAFT_EVAL_DIR:-../shared/data/eagle-eval}" .stage/p5/eagle-eval
  echo "head: $head"
fi
# BASE=<commit>: .stage/base, that commit's updraft/ and benchmarks/*.py without the shipped head's weights (env.sh
# copies this checkout's beside them), for device calls that time the base beside this tree
if [ -n "${BASE:-}" ]; then
  rm -rf .stage/base && mkdir -p .stage/base
  git archive "$BASE" updraft 'benchmarks/*.py' | tar -x -C .stage/base --exclude='updraft/heads/*/model.safetensors'
  echo "base: $(git rev-parse --short "$BASE")"
fi
du -sh .whl .stage/*
