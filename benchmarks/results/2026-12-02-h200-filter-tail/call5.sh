# call 5 (H200; carries .stage/p3): staging only
R=benchmarks/results/2026-12-02-h200-filter-tail
source $R/env.sh
ls -la /tmp/c | head
