# call 14: the bs-8 verify (48 token rows) on the fused layers (UPDRAFT_FUSED_MAX_ROWS=64) against
# the unfused ones it takes by default (40), kernel by kernel with PDL off, and the replays with PDL on
source benchmarks/results/2026-11-27-h100-cycle-kernels/env.sh
for pdl in 0 1; do
  for rows in 40 64; do
    UPDRAFT_PDL=$pdl UPDRAFT_FUSED_MAX_ROWS=$rows timeout 100 python benchmarks/decode_kernels.py --models smollm2 --skip-gemms \
      --variants fused --batch-sizes 8 --out /tmp/dk-$pdl-$rows 2>&1 | grep -E "^ +smollm2 bs 8" | cut -c1-200
    python -c "
import json; rows=json.load(open('/tmp/dk-$pdl-$rows/decode_kernels.json'))
rows=rows if isinstance(rows, list) else rows['steps']
print('pdl $pdl rows $rows', [(r['mode'], round(r['ms'], 3), r['kernels'], round(r['busy_ms'], 3)) for r in rows if r['model'] == 'smollm2'])"
    cp /tmp/dk-$pdl-$rows/decode_kernels.json $OUT/run14-decode_kernels-bs8-pdl$pdl-rows$rows.json
  done
done
