# call 16: the verify block's attention (decode kernel + merge) without PDL (UPDRAFT_PDL without the
# new verify_attention family), on the fused layers to 64 rows or the default 40; steps at bs 1
# and 8, then the S = 5 cycle (random SmolLM2 shape + builtin:smollm2) for the default and the
# candidate policy
source benchmarks/results/2026-11-27-h100-cycle-kernels/env.sh
for pdl in 1 gemv,attention,sampling; do
  for rows in 40 64; do
    UPDRAFT_PDL=$pdl UPDRAFT_FUSED_MAX_ROWS=$rows timeout 100 python benchmarks/decode_kernels.py --models smollm2 --skip-gemms \
      --variants fused --batch-sizes 1,8 --out /tmp/dkv > /dev/null 2>&1
    python -c "
import json; rows=json.load(open('/tmp/dkv/decode_kernels.json')); rows=rows if isinstance(rows, list) else rows['steps']
print('pdl $pdl rows $rows', [(r['mode'][:6], r['bs'], round(r['ms'], 3), r['kernels']) for r in rows if r['model'] == 'smollm2'])"
    cp /tmp/dkv/decode_kernels.json $OUT/run16-decode_kernels-pdl-$(echo $pdl | tr , -)-rows$rows.json
  done
done
for cfg in "1 40" "gemv,attention,sampling 64" "1 40" "gemv,attention,sampling 64"; do
  set -- $cfg
  UPDRAFT_PDL=$1 UPDRAFT_FUSED_MAX_ROWS=$2 timeout 100 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless \
    --sizes 1,8 --out /tmp/siv 2>&1 | grep -E '"(plain_step_ms|cycle_ms_(greedy|sampled)_bs)' | tr -d '\n'; echo " <- pdl $1 rows $2"
  cp /tmp/siv/spec_iteration.json $OUT/run16-spec_iteration-pdl-$(echo $1 | tr , -)-rows$2-$RANDOM.json
done
