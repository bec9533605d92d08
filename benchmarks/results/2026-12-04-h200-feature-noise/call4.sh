# Call 4 (carries .stage/p4: the eval sets): meant to evaluate run G and train run H; the machine had been given
# back after call 3 (/tmp lost), so it found neither the GGUF nor the head and failed at once: see call5.sh.
source benchmarks/device/env.sh >/dev/null
NAME=g HEAD=/tmp/g-head bash benchmarks/device/head_eval.sh
NAME=h INIT=updraft/heads/smollm2-135m-instruct-eagle3 SEED=18 T=0.5 EVAL=0 bash benchmarks/device/head_run.sh
