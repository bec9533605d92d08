# Call 4 (a fresh machine: the one of call 3 was given back while idle, /tmp lost; calls 1-2 carried p1 and p2
# again): carries .stage/p3 (the GGUF joins; the eval sets were still under /tmp/c from a failed call on this
# machine). Run F: run D again with the training budget that lets 2,500 steps finish (generation at T 0.3 took
# 141-163 s, so 440 s stopped run D at step 1,368).
source benchmarks/device/env.sh >/dev/null
NAME=f INIT=updraft/heads/smollm2-135m-instruct-eagle3 SEED=17 T=0.3 TRAIN_BUDGET=545 bash benchmarks/device/head_run.sh
