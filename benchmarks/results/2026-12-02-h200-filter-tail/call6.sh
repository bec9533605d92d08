# call 6 (H200; carries .stage/p4 with the eval sets; joins the GGUF): the SmolLM2 S = 5 cycle with the real model
# over real text, new against base, twice
R=benchmarks/results/2026-12-02-h200-filter-tail
source $R/env.sh
bash $R/cost_pair.sh real1 --smollm $GGUF
bash $R/cost_pair.sh real2 --smollm $GGUF
