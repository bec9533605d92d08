"""Build a case's pool, table and tensors; run a backend eagerly; compare with the float64 reference.

The setup mirrors production: the table row of each request is written for its whole sequence,
prefix K/V already sit in the pool, and the backend writes the new K/V itself through
``out_cache_loc``. Slot layouts exercise the paging: pages handed out contiguously, shuffled,
interleaved between requests, or in decreasing order (non-monotonic slots).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from updraft.attention import backend_class
from updraft.attention.reference import reference_attention, reference_mla_attention
from updraft.batch import ForwardBatch, make_forward_batch
from updraft.kit.cases import TOLERANCE, AttnCase
from updraft.memory.pools import KVPool

DTYPE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class CaseSetup:
    case: AttnCase
    kv_pool: KVPool
    req_to_token: torch.Tensor
    q: torch.Tensor  # [T, Hq, D]
    k_new: torch.Tensor  # [T, Hkv, D]
    v_new: torch.Tensor  # [T, Hkv, Dv] (a view of k_new's first Dv columns with a shared latent cache)
    k_full: list[torch.Tensor]  # per request, logical positions [L, Hkv, D]
    v_full: list[torch.Tensor]  # [L, Hkv, Dv]
    tree_mask: torch.Tensor | None  # [B, s, s] bool
    rows: list[int]


def assign_pages(case: AttnCase, gen: torch.Generator) -> tuple[list[list[int]], int]:
    """Pages of each request per the case's layout; returns (pages per request, num_pages)."""
    p = case.page_size
    need = [-(-s // p) for s in case.seq_lens]
    total = sum(need)
    num_pages = total + 3  # + scratch page 0 + two spare pages so the last slot is not the end
    pool = list(range(1, num_pages))
    if case.layout == "contiguous":
        order = pool[:total]
    elif case.layout == "shuffled":
        perm = torch.randperm(len(pool), generator=gen).tolist()
        order = [pool[i] for i in perm][:total]
    elif case.layout == "nonmonotonic":
        order = list(reversed(pool))[:total]
    else:  # interleaved: round-robin between requests
        order = []
        it = iter(pool)
        remaining = list(need)
        slots: list[list[int]] = [[] for _ in need]
        while any(remaining):
            for i in range(len(need)):
                if remaining[i]:
                    slots[i].append(next(it))
                    remaining[i] -= 1
        return slots, num_pages
    pages, k = [], 0
    for n in need:
        pages.append(order[k : k + n])
        k += n
    return pages, num_pages


def random_tree_mask(stride: int, gen: torch.Generator) -> torch.Tensor:
    """A random tree over ``stride`` nodes (node 0 the root): mask[i, j] = j is i or an ancestor."""
    parent = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, stride)]
    mask = torch.zeros(stride, stride, dtype=torch.bool)
    for i in range(stride):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parent[j]
    return mask


def build_case(case: AttnCase, device: torch.device | str = "cpu") -> CaseSetup:
    gen = torch.Generator().manual_seed(1000 + case.seed)
    dtype = DTYPE[case.dtype]
    pages, num_pages = assign_pages(case, gen)
    p = case.page_size
    bsz = case.batch_size
    # The table is as wide as the longest sequence plus the case's slack (0: exactly at the
    # table width, where an off-by-one in a backend's table-width bound shows).
    width = max(case.seq_lens) + case.table_slack
    table = torch.zeros(bsz + 2, width, dtype=torch.int32)
    rows = list(range(2, bsz + 2))  # row 1 left unused so row indices are not trivially i + 1
    for i, (row, seq) in enumerate(zip(rows, case.seq_lens)):
        pos = torch.arange(seq)
        slots = torch.tensor(pages[i], dtype=torch.long)[pos // p] * p + pos % p if seq else torch.zeros(0, dtype=torch.long)
        table[row, :seq] = slots.to(torch.int32)
    pool = KVPool(1, num_pages, p, case.num_kv_heads, case.head_dim, dtype, device, v_head_dim=case.dv,
                  shared_kv=case.shared_kv)
    # Poison every slot: a kernel that reads a slot it should not see produces a large error.
    # (A shared latent cache's V is K's leading columns: poisoned with K.)
    pool.k_buffer[0].fill_(7.0)
    if not case.shared_kv:
        pool.v_buffer[0].fill_(-7.0)
    pool.k_buffer[0][0] = 0.0
    pool.v_buffer[0][0] = 0.0
    k_full, v_full, q_rows, kn = [], [], [], []
    for row, pre, ext in zip(rows, case.prefix_lens, case.extend_lens):
        seq = pre + ext
        k = torch.randn(seq, case.num_kv_heads, case.head_dim, generator=gen).to(dtype)
        if case.shared_kv:
            v = k[..., : case.dv]
        else:
            v = torch.randn(seq, case.num_kv_heads, case.dv, generator=gen).to(dtype)
        k_full.append(k)
        v_full.append(v)
        pool.store(0, table[row, :pre].long().to(device), k[:pre].to(device), v[:pre].to(device))
        kn.append(k[pre:])
        q_rows.append(torch.randn(ext, case.num_heads, case.head_dim, generator=gen).to(dtype))
    tree = None
    if case.tree:
        tree = torch.stack([random_tree_mask(case.extend_lens[0], gen) for _ in range(bsz)])
    k_new = torch.cat(kn).to(device)
    if case.shared_kv:
        v_new = k_new[..., : case.dv]  # what an MLA model passes: V is K's latent part, not stored again
    else:
        v_new = torch.cat([v[pre:] for v, pre in zip(v_full, case.prefix_lens)]).to(device)
    return CaseSetup(
        case=case,
        kv_pool=pool,
        req_to_token=table.to(device),
        q=torch.cat(q_rows).to(device),
        k_new=k_new,
        v_new=v_new,
        k_full=k_full,
        v_full=v_full,
        tree_mask=tree.to(device) if tree is not None else None,
        rows=rows,
    )


def make_batch(setup: CaseSetup) -> ForwardBatch:
    case = setup.case
    dev = setup.q.device
    return make_forward_batch(
        case.mode,
        torch.zeros(setup.q.shape[0], dtype=torch.long, device=dev),
        torch.tensor(setup.rows, dtype=torch.long, device=dev),
        torch.tensor(case.seq_lens, dtype=torch.int32),
        torch.tensor(case.extend_lens, dtype=torch.int32),
        setup.req_to_token,
        logits="none",
        stride=case.stride,
        custom_mask=setup.tree_mask,
    )


def pad_like_graph(
    batch: ForwardBatch, pad: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[ForwardBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``batch`` (a fixed-stride mode) plus ``pad`` padded graph rows the way the graph runner
    writes them: seq_lens = 1 (the fill value), req_pool_indices = 0, extend = stride,
    out_cache_loc = 0 (the scratch slot); q/k/v get random rows for them. For backend tests
    that pad by hand (``ForwardBatch.check_conventions`` refuses such rows: bypass it)."""
    s = batch.stride
    gen = torch.Generator().manual_seed(5)

    def cat(x: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, fill.to(device=x.device, dtype=x.dtype)])

    n = pad * s
    start = batch.extend_start_loc
    new_start = torch.arange(pad, dtype=start.dtype) * s + batch.num_tokens
    padded = ForwardBatch(
        mode=batch.mode,
        batch_size=batch.batch_size + pad,
        input_ids=cat(batch.input_ids, torch.zeros(n)),
        positions=cat(batch.positions, torch.zeros(n)),
        req_pool_indices=cat(batch.req_pool_indices, torch.zeros(pad)),
        seq_lens=cat(batch.seq_lens, torch.ones(pad)),
        extend_seq_lens=cat(batch.extend_seq_lens, torch.full((pad,), s)),
        extend_start_loc=cat(start, new_start),
        out_cache_loc=cat(batch.out_cache_loc, torch.zeros(n)),
        seq_lens_cpu=cat(batch.seq_lens_cpu, torch.ones(pad)),
        extend_seq_lens_cpu=cat(batch.extend_seq_lens_cpu, torch.full((pad,), s)),
        logits_indices=batch.logits_indices,
        stride=s,
        custom_mask=None
        if batch.custom_mask is None
        else cat(batch.custom_mask, torch.zeros(pad, s, s, dtype=torch.bool)),
    )
    extra = [torch.randn((n, *x.shape[1:]), generator=gen) for x in (q, k, v)]
    q2, k2, v2 = (cat(x, e) for x, e in zip((q, k, v), extra, strict=True))
    return padded, q2, k2, v2


def reference_output(setup: CaseSetup, scale: float) -> torch.Tensor:
    case = setup.case
    outs = []
    for i, ext in enumerate(case.extend_lens):
        start = sum(case.extend_lens[:i])
        q = setup.q[start : start + ext].cpu()
        mask = setup.tree_mask[i].cpu() if setup.tree_mask is not None else None
        if case.shared_kv:  # the latent rows alone: the MLA reference reads V from them itself
            outs.append(reference_mla_attention(q, setup.k_full[i][:, 0], case.dv, scale, mask))
        else:
            outs.append(reference_attention(q, setup.k_full[i], setup.v_full[i], scale, mask))
    return torch.cat(outs)


@dataclass
class CaseResult:
    case: AttnCase
    rel_err: float
    kv_ok: bool
    has_nan: bool
    tol: float

    @property
    def ok(self) -> bool:
        return self.kv_ok and not self.has_nan and self.rel_err <= self.tol

    def describe(self) -> str:
        return f"{self.case.name}: rel_err={self.rel_err:.2e} (tol {self.tol:.0e}) kv_ok={self.kv_ok} nan={self.has_nan}"


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    denom = ref.abs().max().item() or 1.0
    return (out.double().cpu() - ref).abs().max().item() / denom


def run_eager(backend_name: str, case: AttnCase, device: torch.device | str = "cpu") -> CaseResult:
    """One eager forward of ``backend_name`` on ``case`` compared with the reference."""
    setup = build_case(case, device)
    cls = backend_class(backend_name)
    backend = cls(setup.kv_pool, setup.req_to_token, case.num_heads, case.num_kv_heads, case.head_dim)
    batch = make_batch(setup)
    batch.attn_backend = backend
    backend.init_forward_metadata(batch)
    out = backend.forward(setup.q, setup.k_new, setup.v_new, 0, batch)
    return check_output(setup, batch, out, backend.scale)


def check_output(setup: CaseSetup, batch: ForwardBatch, out: torch.Tensor, scale: float) -> CaseResult:
    ref = reference_output(setup, scale)
    k_written = setup.kv_pool.k_buffer[0][batch.out_cache_loc]
    v_written = setup.kv_pool.v_buffer[0][batch.out_cache_loc]
    kv_ok = bool(torch.equal(k_written.cpu(), setup.k_new.cpu()) and torch.equal(v_written.cpu(), setup.v_new.cpu()))
    return CaseResult(
        case=setup.case,
        rel_err=relative_error(out, ref),
        kv_ok=kv_ok,
        has_nan=bool(torch.isnan(out).any()),
        tol=TOLERANCE[setup.case.dtype],
    )
