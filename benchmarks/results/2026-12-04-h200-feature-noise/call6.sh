# Call 6 (the same machine, warm): run H on the six sets.
source benchmarks/device/env.sh >/dev/null
NAME=h HEAD=/tmp/h-head bash benchmarks/device/head_eval.sh
