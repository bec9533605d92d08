# Call 7 (same machine, right after call 6): call 6's head did not come back (the tool returns at most 8 files);
# its files copied to $OUT alone
mkdir -p $OUT/v6b && cp /tmp/updraft-gpu-head/head/config.json /tmp/updraft-gpu-head/head/model-0000*.safetensors /tmp/updraft-gpu-head/head/train_log.json /tmp/updraft-gpu-head/head/train_state.json $OUT/v6b/ && ls -la $OUT/v6b
