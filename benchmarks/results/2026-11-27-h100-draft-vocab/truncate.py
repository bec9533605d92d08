"""Cut a trained 32k-vocabulary EAGLE-3 head down to smaller draft vocabularies (its rows kept
unchanged, the others dropped), to separate what the larger vocabulary buys from what the
fine-tune's data buys: 8192 = exactly the shipped head's tokens; 16384 = those plus the next most
frequent generated tokens of the training data (``sequences.safetensors``, responses only).

    python truncate.py HEAD SHIPPED_HEAD DATA_DIR GGUF OUT_BASE
writes OUT_BASE-8192/ and OUT_BASE-16384/ (bf16, one file each)."""
import sys

import torch
from safetensors.torch import load_file

from updraft.models.eagle import default_aux_layers, load_draft_head
from updraft.models.loader import load_checkpoint
from updraft.train.heads import resize_draft_vocab, save_head, select_draft_vocab

head_dir, shipped_dir, data_dir, gguf, out = sys.argv[1:6]
loaded = load_checkpoint(gguf, dtype=torch.float32, device="cuda", progress=False)
target = loaded.model
vocab = target.config.vocab_size
src = load_draft_head(head_dir, target, torch.float32, "cuda")
shipped = load_draft_head(shipped_dir, target, torch.float32, "cuda")
ship_ids = shipped.to_target_ids(torch.arange(shipped.lm_head.out_features, device="cuda")).cpu()
t = load_file(f"{data_dir}/sequences.safetensors")
tokens, off, plen = t["tokens"].long(), t["offsets"].tolist(), t["prompt_lens"].tolist()
mask = torch.zeros(tokens.numel(), dtype=torch.bool)
for i in range(len(off) - 1):
    mask[off[i] + plen[i] : off[i + 1]] = True
counts = torch.bincount(tokens[mask], minlength=vocab)[:vocab]
aux = default_aux_layers(target.config.num_layers)
src_ids = src.to_target_ids(torch.arange(src.lm_head.out_features, device="cuda")).cpu()
ranked = counts.clone()
outside = torch.ones(vocab, dtype=torch.bool)
outside[src_ids] = False
ranked[outside] = -1  # only the trained head's own tokens can be kept
for size, ids in ((8192, ship_ids), (16384, select_draft_vocab(ranked, 16384, first=ship_ids))):
    assert set(ids.tolist()) <= set(src_ids.tolist())
    head, cfg = resize_draft_vocab(src, target, ids.sort().values, aux, device="cuda")
    folder = save_head(head, cfg, f"{out}-{size}", dtype=torch.bfloat16)
    cover = float(counts[ids].sum() / counts.sum())
    print(f"{folder}: {ids.numel()} tokens, {cover:.4f} of the generated training tokens", flush=True)
print(f"full: {src_ids.numel()} tokens, {float(counts[src_ids].sum() / counts.sum()):.4f}", flush=True)
