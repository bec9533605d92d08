#!/usr/bin/env bash
# The whole recipe of scripts/gpu_train_head.sh, shrunk (TINY=1), on the CPU: three "device
# calls", each on a "fresh machine" (its own WORK, nothing kept), passing on only what a call
# brings back ($OUT: at most 8 files of at most 16 MiB, checked here):
#   run 1: RUN=first (generate, train, bring back the head)
#   run 2: RUN=resume RESUME_FROM=<run 1's head> (regenerate the data from the seed, continue)
#   run 3: RUN=resume RESUME_FROM=<run 2's head> EVAL=1 (continue, then the evaluation)
# A few minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE:-/tmp/updraft-tiny-recipe}
rm -rf "$BASE"
mkdir -p "$BASE"
export TINY=1

check_out() {  # the device tool's limits on what comes back
  local out=$1 n big
  n=$(find "$out" -type f | wc -l)
  big=$(find "$out" -type f -size +16M | wc -l)
  echo "== $out: $n files, $(du -sh "$out" | cut -f1); over 16 MiB: $big"
  find "$out" -type f -printf '   %P %s\n'
  [ "$n" -le 8 ] && [ "$big" -eq 0 ] || { echo "too much to bring back from $out" >&2; exit 1; }
}

t0=$(date +%s)
OUT=$BASE/out1 WORK=$BASE/work1 RUN=first EVAL=0 bash scripts/gpu_train_head.sh
check_out "$BASE/out1"
cp -r "$BASE/out1/head" "$BASE/back1"      # what the lead keeps between calls
rm -rf "$BASE/work1"                        # the machine is handed back
OUT=$BASE/out2 WORK=$BASE/work2 RUN=resume RESUME_FROM=$BASE/back1 EVAL=0 bash scripts/gpu_train_head.sh
check_out "$BASE/out2"
cp -r "$BASE/out2/head" "$BASE/back2"
rm -rf "$BASE/work2"
OUT=$BASE/out3 WORK=$BASE/work3 RUN=resume RESUME_FROM=$BASE/back2 EVAL=1 bash scripts/gpu_train_head.sh
check_out "$BASE/out3"
echo "== tiny recipe done in $(( $(date +%s) - t0 ))s"
