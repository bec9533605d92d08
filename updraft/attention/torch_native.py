"""``torch_native``: paged attention with ``scaled_dot_product_attention`` (CPU and CUDA).

Request ``b`` has ``extend_seq_lens[b]`` queries at positions ``prefix_b .. seq_lens[b]-1`` and
attends to positions ``j <= prefix_b + i`` (``j < seq_lens[b]``), optionally restricted by a tree
mask inside the draft block. Two paths, chosen by mode:

* fixed-stride modes (DECODE, DRAFT_DECODE, TARGET_VERIFY, DRAFT_EXTEND_V2): one padded, batched
  SDPA call over gathered K/V with an explicit mask;
* variable-length modes (EXTEND, DRAFT_EXTEND v1): one SDPA call per request, prefix K/V from the
  pool and the new K/V from the forward's own tensors, causal (flash path when there is no
  prefix, a lower-right causal mask otherwise). Padding long prompts to the batch's longest
  would waste most of the work.

The gather indices, masks and per-request ranges are the metadata, built once per forward by
``build_metadata``; every layer reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from updraft.attention.base import AttentionBackend, UnsupportedModeError
from updraft.batch import REAL_MODES, ForwardBatch, ForwardMode


@dataclass
class TorchNativeMetadata:
    kv_slots: torch.Tensor  # [B, max_kv] int64: pool slot of (request, position); 0 past seq_len
    mask: torch.Tensor  # [B, 1, max_q, max_kv] bool: True = may attend
    q_gather: torch.Tensor  # [B, max_q] int64: token row of (request, query); 0 for padding
    row_req: torch.Tensor  # [T] int64: request of each token row
    row_off: torch.Tensor  # [T] int64: query index of each token row inside its request
    kv_pos: torch.Tensor  # [T] int64: position of each token row (= prefix + offset)
    max_q: int
    max_kv: int
    # Variable-length modes: per request (first row, new tokens, prefix slots [prefix], causal mask
    # [n, prefix + n] or None when the prefix is empty).
    ragged: list[tuple[int, int, torch.Tensor, torch.Tensor | None]] | None = None


def build_metadata(
    batch: ForwardBatch, req_to_token: torch.Tensor, max_q: int, max_kv: int
) -> TorchNativeMetadata:
    """The one metadata builder (eager now; graph capture/replay pass fixed maxima)."""
    batch.check_conventions()
    dev = batch.device
    bsz = batch.batch_size
    num_tokens = batch.num_tokens
    seq = batch.seq_lens.long()
    ext = batch.extend_seq_lens.long()
    prefix = (seq - ext).clamp(min=0)
    start = batch.extend_start_loc.long()

    row_req = torch.repeat_interleave(torch.arange(bsz, device=dev), ext, output_size=num_tokens)
    row_off = torch.arange(num_tokens, device=dev) - start[row_req]
    rows = req_to_token[batch.req_pool_indices.long(), :max_kv].long()
    j = torch.arange(max_kv, device=dev)
    kv_valid = j[None, :] < seq[:, None]
    kv_slots = torch.where(kv_valid, rows, torch.zeros_like(rows))
    if batch.mode.is_extend_like(include_v2=False):
        # EXTEND, DRAFT_EXTEND (v1): variable lengths, one SDPA per request.
        ragged = []
        prefix_cpu = batch.prefix_lens_cpu().tolist()
        first = 0
        for b, n in enumerate(batch.extend_seq_lens_cpu.tolist()):
            pre = prefix_cpu[b]
            causal_mask = torch.ones(n, pre + n, dtype=torch.bool, device=dev).tril(pre) if pre else None
            ragged.append((first, n, kv_slots[b, :pre], causal_mask))
            first += n
        empty = torch.zeros(0, dtype=torch.long, device=dev)
        return TorchNativeMetadata(
            kv_slots=kv_slots, mask=empty.bool(), q_gather=empty, row_req=row_req, row_off=row_off,
            kv_pos=prefix[row_req] + row_off, max_q=max_q, max_kv=max_kv, ragged=ragged,
        )
    i = torch.arange(max_q, device=dev)
    q_valid = i[None, :] < ext[:, None]  # [B, max_q]
    causal = j[None, None, :] <= (prefix[:, None, None] + i[None, :, None])
    allowed = kv_valid[:, None, :] & causal & q_valid[:, :, None]
    if batch.custom_mask is not None:
        allowed = allowed & _tree_allowed(batch, prefix, max_q, max_kv)
    # Padded query rows attend to slot 0 only, so softmax never sees an all-masked row.
    allowed[:, :, 0] |= ~q_valid
    q_gather = torch.where(q_valid, start[:, None] + i[None, :], torch.zeros_like(q_valid, dtype=torch.long))
    return TorchNativeMetadata(
        kv_slots=kv_slots,
        mask=allowed[:, None],
        q_gather=q_gather,
        row_req=row_req,
        row_off=row_off,
        kv_pos=prefix[row_req] + row_off,
        max_q=max_q,
        max_kv=max_kv,
    )


def _tree_allowed(batch: ForwardBatch, prefix: torch.Tensor, max_q: int, max_kv: int) -> torch.Tensor:
    """Tree mask: ``custom_mask`` is [B, stride, stride] bool over the draft block (True = may
    attend). Prefix positions stay visible; block positions follow the mask."""
    mask = batch.custom_mask
    assert mask is not None
    bsz, s, _ = mask.shape
    dev = batch.device
    j = torch.arange(max_kv, device=dev)
    rel = j[None, :] - prefix[:, None]  # [B, max_kv]
    in_block = (rel >= 0) & (rel < s)
    rel_c = rel.clamp(0, s - 1)
    i = torch.arange(max_q, device=dev).clamp(max=s - 1)
    block = mask[torch.arange(bsz, device=dev)[:, None, None], i[None, :, None], rel_c[:, None, :]]
    return torch.where(in_block[:, None, :], block, torch.ones_like(block))


def copy_metadata_into(dst: TorchNativeMetadata, src: TorchNativeMetadata) -> None:
    """Graph replay: new values into the captured tensors. Host scalars must not change."""
    if (dst.max_q, dst.max_kv) != (src.max_q, src.max_kv) or dst.ragged is not None:
        raise AssertionError(
            f"torch_native graph metadata frozen at max_q={dst.max_q}, max_kv={dst.max_kv}; "
            f"replay needs max_q={src.max_q}, max_kv={src.max_kv}"
        )
    for name in ("kv_slots", "mask", "q_gather", "row_req", "row_off", "kv_pos"):
        getattr(dst, name).copy_(getattr(src, name))


class TorchNativeBackend(AttentionBackend):
    """Reference-quality backend on ``scaled_dot_product_attention``.

    CUDA graphs (and the CPU emulator): the fixed-stride modes use the padded path with host
    sizes frozen at capture: ``max_q`` = the stride and ``max_kv`` = the full ``req_to_token``
    width (every replay attends over the whole table width, masked; simple, not fast for long
    contexts). Variable-length modes loop over requests on the host and are eager only.
    """

    name = "torch_native"
    supported_modes = frozenset(REAL_MODES)
    graph_modes = frozenset(
        {ForwardMode.DECODE, ForwardMode.DRAFT_DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND_V2}
    )
    devices = frozenset({"cpu", "cuda"})
    v_layouts = True
    stored_kv = True  # save_kv=False places the new rows into its gather: no extra cost

    def init_graph_state(self, max_bs: int, max_tokens_per_req: int) -> None:
        return None  # metadata buffers are created per captured batch size

    def init_capture_metadata(self, batch: ForwardBatch) -> None:
        if batch.mode not in self.graph_modes:
            raise UnsupportedModeError(f"torch_native cannot capture {batch.mode.name} in a graph")
        batch.attn_metadata = build_metadata(batch, self.req_to_token, batch.stride, int(self.req_to_token.shape[1]))

    def init_replay_metadata(self, batch: ForwardBatch) -> None:
        md: TorchNativeMetadata = batch.attn_metadata
        copy_metadata_into(md, build_metadata(batch, self.req_to_token, md.max_q, md.max_kv))

    def init_forward_metadata(self, batch: ForwardBatch) -> None:
        self.check_mode(batch.mode)
        max_q = int(batch.extend_seq_lens_cpu.max()) if batch.batch_size else 0
        max_kv = int(batch.seq_lens_cpu.max()) if batch.batch_size else 0
        batch.attn_metadata = build_metadata(batch, self.req_to_token, max(max_q, 1), max(max_kv, 1))

    def _attend_ragged(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int, md: TorchNativeMetadata
    ) -> torch.Tensor:
        k_pool = self.kv_pool.k_buffer[layer_id]
        v_pool = self.kv_pool.v_buffer[layer_id]
        out = q.new_empty(*q.shape[:-1], v.shape[-1])
        gqa = self.num_heads != self.num_kv_heads
        assert md.ragged is not None
        for first, n, prefix_slots, mask in md.ragged:
            kn, vn = k[first : first + n], v[first : first + n]
            if prefix_slots.numel():
                kn = torch.cat([k_pool[prefix_slots].to(q.dtype), kn.to(q.dtype)])
                vn = torch.cat([v_pool[prefix_slots].to(q.dtype), vn.to(q.dtype)])
            o = F.scaled_dot_product_attention(
                q[first : first + n].transpose(0, 1)[None],
                kn.transpose(0, 1)[None].to(q.dtype),
                vn.transpose(0, 1)[None].to(q.dtype),
                attn_mask=mask,
                is_causal=mask is None,
                scale=self.scale,
                enable_gqa=gqa,
            )
            out[first : first + n] = o[0].transpose(0, 1)
        return out

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        save_kv: bool,
    ) -> torch.Tensor:
        md: TorchNativeMetadata = batch.attn_metadata
        k_pool = self.kv_pool.k_buffer[layer_id]
        v_pool = self.kv_pool.v_buffer[layer_id]
        if save_kv:
            self.kv_pool.store(layer_id, batch.out_cache_loc, k, v)
        if md.ragged is not None:
            return self._attend_ragged(q, k, v, layer_id, md)
        kb = k_pool[md.kv_slots]  # [B, max_kv, Hkv, D]
        vb = v_pool[md.kv_slots]
        if not save_kv:
            # The new keys are not in the pool: place them at their positions in the gather.
            kb[md.row_req, md.kv_pos] = k.to(kb.dtype)
            vb[md.row_req, md.kv_pos] = v.to(vb.dtype)
        qb = q[md.q_gather]  # [B, max_q, H, D]
        out = F.scaled_dot_product_attention(
            qb.transpose(1, 2),
            kb.transpose(1, 2).to(q.dtype),
            vb.transpose(1, 2).to(q.dtype),
            attn_mask=md.mask,
            scale=self.scale,
            enable_gqa=self.num_heads != self.num_kv_heads,
        )  # [B, H, max_q, D]
        return out.transpose(1, 2)[md.row_req, md.row_off]

    def forward_extend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        *,
        save_kv: bool = True,
    ) -> torch.Tensor:
        return self._attend(q, k, v, layer_id, batch, save_kv)

    def forward_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        layer_id: int,
        batch: ForwardBatch,
        *,
        save_kv: bool = True,
    ) -> torch.Tensor:
        return self._attend(q, k, v, layer_id, batch, save_kv)
