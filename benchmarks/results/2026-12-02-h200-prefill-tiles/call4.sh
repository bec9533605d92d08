# call 4 (H200; carries .stage/base, .whl): an eager extend with no cached prefix runs one KV split (new) against
# the committed prefill change without that rule (base = f775ee9), short prompts, production tiles, two rounds
R=benchmarks/results/2026-12-02-h200-prefill-tiles
source benchmarks/device/env.sh
for round in 1 2; do for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 100 python benchmarks/prefill_sweep.py --production-only \
     --shapes 1/0/512,1/0/1024,1/0/2048,2/0/1024,8/0/256 --out $OUT/split1_${side}_$round 2>&1 | grep -v Warn \
     | grep -E "splits|bs "); echo "$side round $round rc $?"
done; done
(cd $OUT && tar czf call4.tgz --remove-files *)
