# Calls 1-2 carry the first two parts of the GGUF's xz stream (.stage/p1, .stage/p2); nothing runs yet.
source benchmarks/device/env.sh
python -c "import torch, triton; print(torch.__version__, triton.__version__)"
