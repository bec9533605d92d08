"""The mutation campaign's mutations, as data.

Each mutation reintroduces one bug (a failure class of ../shared/design/spec-decoding.md, or one
of the kit's own) as exact search/replace edits. An anchor must occur EXACTLY once in its file:
when the code moves, the campaign (and ``tests/kit/test_mutations.py``) fails loudly instead of
silently testing nothing.

``targets`` are tried in order until one fails (kills the mutation). A target is either
``"kit <args>"`` (``updraft kit run --quick --device <device> --jobs 1 <args>``) or pytest arguments
(run with ``-x -q``). ``device="gpu"`` marks mutations only a real GPU can catch (the emulator has
no memory pool and no capture-time restrictions); the CPU campaign lists them as not run.
"""

from __future__ import annotations

from dataclasses import dataclass

GC = "tests/runtime/test_failure_classes.py"
TRITON_TESTS = "tests/attention/test_triton.py"


@dataclass(frozen=True)
class Edit:
    file: str  # repository-relative path
    anchor: str  # exact text; must occur exactly once in the file
    replacement: str


@dataclass(frozen=True)
class Mutation:
    name: str
    failure_class: str  # "1" .. "11", "O1" .. "O4" (overlap hazards), or "-" for the kit's own list
    what: str  # one line: what the mutation changes
    edits: tuple[Edit, ...]
    targets: tuple[str, ...]
    device: str = "cpu"  # "cpu": catchable on CPU; "gpu": only on a real GPU

    @property
    def files(self) -> list[str]:
        return sorted({e.file for e in self.edits})


def _m(name: str, cls: str, what: str, file: str, anchor: str, repl: str, *targets: str, device: str = "cpu") -> Mutation:
    return Mutation(name, cls, what, (Edit(file, anchor, repl),), tuple(targets), device)


RUNNER = "updraft/runtime/graphs/phase_graph.py"
CTX = "updraft/spec/context_vocab.py"
BUILDER = "updraft/runtime/phase_inputs.py"
TN = "updraft/attention/torch_native.py"
TB = "updraft/attention/triton_backend.py"
TBEXT = "updraft/attention/triton_kernels/extend.py"
PROP = "updraft/spec/proposers.py"

ENGINE = "updraft/engine/engine.py"
FUSED = "updraft/spec/fused.py"
COMMIT = "updraft/spec/commit.py"
FP = "tests/spec/test_fused_plain.py"
FS = "tests/spec/test_fused.py"
FN = "tests/spec/test_fused_ngram.py"
MTP = "tests/spec/test_mtp.py"
FUSED_COLUMN = "fused iteration"  # the kit's production-runner column of FusedIteration
NGD = "updraft/spec/ngram_device.py"
SLOTS = "updraft/attention/triton_kernels/slots.py"

MUTATIONS: tuple[Mutation, ...] = (
    # ---- failure classes 1-11 ------------------------------------------------------------
    _m("c1-packed-starts-uniform", "1", "graph replay fills the packed v1 rows' start offsets with a uniform stride",
       BUILDER, "        a32[2 * b_max : 2 * b_max + n] = starts\n",
       "        a32[2 * b_max : 2 * b_max + n] = np.arange(n) * width  # MUTATION\n",
       "kit --backend triton --mode DRAFT_EXTEND --runner graph-metadata",
       f"{GC}::test_class1_packed_layout_same_builder_at_capture_and_replay"),
    _m("c1-mla-v2-starts-from-accept-lengths", "1", "the mla backend's V2 draft-extend replay-init packs the query starts (cu_seqlens_q) from the accept lengths (the selected rows) while capture used the uniform stride",
       TB, "            if not same_tensor(src, dst):\n                dst.copy_(src)\n",
       "            if not same_tensor(src, dst):\n                dst.copy_(src)\n"
       "        if self.name == \"mla\" and batch.mode == ForwardMode.DRAFT_EXTEND_V2 and batch.replay_bs is not None:  # MUTATION\n"
       "            accept = batch.logits_indices[: plan.batch_size] - batch.extend_start_loc + 1  # select rows -> accept lengths\n"
       "            md.ext_start[1:].copy_(torch.cumsum(accept, 0)[:-1])\n",
       "kit --backend mla --mode DRAFT_EXTEND_V2 --runner graph-metadata"),
    _m("c2-v2-hidden-from-graph-buffer", "2", "v2 draft extend reads the next feature from the largest graph's output buffer, even after an eager fallback",
       PROP, "            self._keep_states(rows, out)\n            self._store_next(reqs, rows, out.logits, out.hidden)\n            return\n",
       "            self._keep_states(rows, out)\n"
       "            g = self.runner.graph(ForwardMode.DRAFT_EXTEND_V2)  # MUTATION\n"
       "            hidden = g.graphs[g.sizes[0]].output.hidden[:bsz] if g is not None else out.hidden\n"
       "            self._store_next(reqs, rows, out.logits, hidden)\n            return\n",
       "kit --backend torch_native --mode 'draft extend v2'",
       f"{GC}::test_class2_batches_above_the_largest_graph_fall_back"),
    _m("c2-mtp-states-from-graph-buffer", "2", "a multi-layer (MTP) v2 draft extend keeps its modules' states from the largest graph's output buffer, even after an eager fallback",
       PROP, "            self._keep_states(rows, out)\n",
       "            g = self.runner.graph(ForwardMode.DRAFT_EXTEND_V2)  # MUTATION\n"
       "            self._keep_states(rows, replace(out, aux_hidden=g.graphs[g.sizes[0]].output.aux_hidden[:bsz]) if g is not None else out)\n",
       "tests/kit/test_runner_harness.py::test_mtp_columns_pass", f"{MTP}::test_module_states_come_from_the_path_that_ran"),
    _m("c3-v2-as-packed-metadata", "3", "torch_native's metadata builder treats DRAFT_EXTEND_V2 as the packed v1 extend (include_v2=True)",
       TN, "    if batch.mode.is_extend_like(include_v2=False):\n",
       "    if batch.mode.is_extend_like(include_v2=True):  # MUTATION\n",
       "kit --backend torch_native --mode DRAFT_EXTEND_V2 --runner graph-metadata"),
    _m("c3-v2-graph-all-rows", "3", "the v2 draft-extend graph is planned with logits for every row instead of the selected rows",
       "updraft/engine/graph_setup.py", 'PhaseSpec(ForwardMode.DRAFT_EXTEND_V2, w, "select",',
       'PhaseSpec(ForwardMode.DRAFT_EXTEND_V2, w, "all",',
       "kit --backend torch_native --mode 'draft extend v2'",
       f"{GC}::test_class3_v2_graph_outputs_only_selected_rows"),
    _m("c4-split-kv-double-count", "4", "triton reads seq_lens (prefix + new) from the pool as the prefix: the extend is counted twice",
       TBEXT, "    kv = tl.maximum(tl.load(SeqLens + b) - ext, 0)  # the prefix (0 in padded rows: seq 1 < ext)\n",
       "    kv = tl.load(SeqLens + b)  # MUTATION\n",
       "kit --backend triton --mode DRAFT_EXTEND_V2 --runner eager"),
    _m("c4-v2-prefix-only-seq-lens", "4", "the v2 draft extend passes the committed prefix as seq_lens (the other convention)",
       PROP, "                [n + ndt - 1 + off for n in seq_lens],\n",
       "                [n - 1 + off for n in seq_lens],  # MUTATION\n",
       "kit --backend torch_native --mode 'draft extend v2'",
       "tests/spec/test_spec_engine.py -k 'self and v2'"),
    _m("c5-v2-to-decode-path", "5", "the backend router sends DRAFT_EXTEND_V2 to the decode path",
       "updraft/attention/base.py", "        if batch.mode.is_decode() or batch.mode.is_target_verify():\n",
       "        if batch.mode.is_decode() or batch.mode.is_target_verify() or batch.mode == ForwardMode.DRAFT_EXTEND_V2:  # MUTATION\n",
       "kit --backend triton --mode DRAFT_EXTEND_V2 --runner eager",
       f"{GC}::test_class3_v2_graph_outputs_only_selected_rows"),
    _m("c6-replay-rebuilds-metadata", "6", "torch_native's replay-init builds new tensors (and a per-step max_kv) instead of copying into the captured ones",
       TN, "        copy_metadata_into(md, build_metadata(batch, self.req_to_token, md.max_q, md.max_kv))\n",
       "        batch.attn_metadata = build_metadata(batch, self.req_to_token, md.max_q, int(batch.seq_lens_cpu.max()))  # MUTATION\n",
       "kit --backend torch_native --mode DECODE --runner graph"),
    Mutation("c6-host-scalar-at-replay", "6", "triton sizes the packed extend grid from the live batch and updates the frozen launch plan at replay",
             (Edit(TB, "        elif batch.max_extend_len is not None:  # packed under a graph: the captured width\n",
                   "        elif False:  # MUTATION: the live maximum even under a graph\n"),
              Edit(TB, "        if plan != md.plan:\n            raise AssertionError(\n",
                   "        if plan != md.plan:  # MUTATION: recompute host scalars at replay\n            md.plan = plan\n        if False:\n            raise AssertionError(\n")),
             ("kit --backend triton --mode 'draft extend v1'", "kit --backend triton --mode DRAFT_EXTEND --runner graph")),
    Mutation("c7-draft-logits-views", "7", "the per-step draft loop keeps each step's logits (graph output views) and picks tokens after the loop",
             (Edit(PROP, "        toks = [self.next_token[rows]]\n", "        toks = [self.next_token[rows]]\n        views = []  # MUTATION\n"),
              Edit(PROP, "            out = self.runner.forward(batch)\n            tok, q = self._choose(reqs, out.logits, rows, out.hidden)\n",
                   "            out = self.runner.forward(batch)\n            views.append(out.logits)\n            tok, q = self._choose(reqs, out.logits, rows, out.hidden)\n"),
              Edit(PROP, "        tokens = torch.stack(toks, dim=1)\n",
                   "        tokens = torch.stack(toks[:1] + [self._choose(reqs, v)[0] for v in views], dim=1)\n")),
             ("kit --backend torch_native --mode 'draft decode'",)),
    _m("c8-capture-unseeded", "8", "graph capture seeds seq_lens with 0 instead of padding-row values",
       RUNNER, "    st.seq_lens[:bs].copy_(seq)\n", "    st.seq_lens[:bs].zero_()  # MUTATION\n",
       "kit --backend torch_native --mode TARGET_VERIFY --runner graph",
       f"{GC}::test_class8_capture_is_seeded_not_zero"),
    _m("c8-triton-unseeded-lse", "8", "triton's split LSE scratch starts uninitialised (rows no program reaches merge garbage)",
       TB, '            mid_lse = torch.full((tokens, self.num_heads, splits), float("-inf"), device=device)\n',
       "            mid_lse = torch.empty((tokens, self.num_heads, splits), device=device)  # MUTATION\n",
       "kit --backend triton --mode DRAFT_EXTEND_V2 --runner graph",
       f"{TRITON_TESTS}::test_unseeded_zero_metadata_gives_zeros"),
    _m("c9-width-unchecked", "9", "can_run no longer refuses a batch whose width differs from the captured one",
       RUNNER, "        elif shape.stride != p.width:\n", "        elif False:  # MUTATION\n",
       "kit --backend torch_native --mode TARGET_VERIFY --runner graph",
       f"{GC}::test_class9_width_mismatch_is_refused"),
    _m("c10-padded-slots-stale", "10", "the builder leaves the padded tokens' rows from the previous batch (their KV slots are real ones, not the scratch slot)",
       BUILDER, "        a64[2 * t_max + t_real : 2 * t_max + tokens] = 0  # padded tokens: row 0, position 0 -> slot 0\n",
       "        pass  # MUTATION\n",
       "kit --backend torch_native --mode DECODE --runner graph"),
    _m("c10-fused-stale-row-list", "10", "the fused launch stages only the real rows: padded entries of the row list keep a fuller batch's rows (the iteration runs for requests outside the batch)",
       FUSED, "        staged[:] = 0\n", "        pass  # MUTATION\n",
       f"kit --backend torch_native --mode '{FUSED_COLUMN}'"),
    _m("c10-chain-stale-slots", "10", "the draft chain's replay gathers KV slots for its real rows only: padded rows keep stale ones",
       "updraft/runtime/graphs/draft_chain.py", "            st.gather_slots(self.req_to_token, bs)\n", "            st.gather_slots(self.req_to_token, n)  # MUTATION\n",
       "kit --backend torch_native --mode 'draft chain'"),
    _m("c11-table-without-lookahead", "11", "the request table is max_model_len + 1 wide: no room for the speculative lookahead",
       "updraft/engine/engine.py", "        width = self.max_model_len + self.lookahead + 1\n",
       "        width = self.max_model_len + 1  # MUTATION\n",
       "kit --backend torch_native --mode verify",
       f"{GC}::test_class11_exact_max_context_with_lookahead"),
    _m("c11-graph-table-width-minus-one", "11", "torch_native's captured KV bound is the table width - 1 (the last column is never attended)",
       TN, "batch.stride, int(self.req_to_token.shape[1]))\n", "batch.stride, int(self.req_to_token.shape[1]) - 1)  # MUTATION\n",
       "kit --backend torch_native --mode DECODE --runner graph"),
    # ---- the kit's own ---------------------------------------------------------------------
    _m("kv-index-off-by-one", "-", "torch_native gathers the slot of position j + 1 for position j", TN,
       "    rows = req_to_token[batch.req_pool_indices.long(), :max_kv].long()\n",
       "    rows = req_to_token[batch.req_pool_indices.long(), 1 : max_kv + 1].long()  # MUTATION\n",
       "kit --backend torch_native --mode DECODE --runner eager"),
    _m("triton-kv-index-off-by-one", "-", "the decode kernels read the table one position ahead (tiles without prefetch)",
       SLOTS, "        slot = tl.load(table_row + pos, mask=pos < hi, other=0).to(tl.int64)\n",
       "        slot = tl.load(table_row + pos + 1, mask=pos < hi, other=0).to(tl.int64)  # MUTATION\n",
       "kit --backend triton --mode DECODE --runner eager"),
    _m("slot-prefetch-one-ahead", "-", "the decode kernels' slot prefetch reads the next block one position late",
       SLOTS, "        nxt = pos + BLOCK_N\n", "        nxt = pos + BLOCK_N + 1  # MUTATION\n",
       "tests/attention/test_triton.py::test_slots_prefetched_a_block_ahead",
       "tests/attention/test_mla.py::test_slots_prefetched_a_block_ahead"),
    Mutation("jit-helper-string-default", "-", "a jit helper's constexpr takes a string default (the GPU machine's "
             "triton 3.6 cannot compile it, the CPU's 3.9 can: 2026-12-02)",
             (Edit(SLOTS, "def first_slots(table_row, lo, hi, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr):",
                   'def first_slots(table_row, lo, hi, BLOCK_N: tl.constexpr, PREFETCH: tl.constexpr, CACHE: tl.constexpr = ""):'),
              Edit(SLOTS, "    return tl.load(table_row + nxt, mask=(nxt < hi) & PREFETCH, other=0)\n",
                   "    return tl.load(table_row + nxt, mask=(nxt < hi) & PREFETCH, other=0, cache_modifier=CACHE)  # MUTATION\n")),
             ("tests/test_device_triton.py::test_kernels_compile_under_the_device_triton[attention]",)),
    _m("context-pick-scale-ignored", "-", "the context tokens' pick compares logits that lack the norm's 1 / rms "
       "(the fused mid layer's) with scaled context scores", CTX,
       "            if UNSCALED:\n                _, inv = _feature_rms(Feat + b * s_f, H, eps, BLOCK_H)\n                best = best * inv\n",
       "            if False:  # MUTATION\n                _, inv = _feature_rms(Feat + b * s_f, H, eps, BLOCK_H)\n                best = best * inv\n",
       "tests/spec/test_context_vocab.py::test_pick_equals_a_float64_reference"),
    _m("context-pick-bias-dropped", "-", "the context tokens' pick leaves out the head's calibration bias", CTX,
       "            best = sb + bias\n", "            best = sb  # MUTATION\n",
       "tests/spec/test_context_vocab.py::test_pick_equals_a_float64_reference"),
    _m("context-pick-last-tile-wins-ties", "-", "the context tokens' split pick merges its tiles keeping the last of "
       "equal scores (the reference keeps the first)", CTX,
       "                ci = tl.min(tl.where(cs == cbest, q, BLOCK_P), axis=0)\n",
       "                ci = tl.max(tl.where(cs == cbest, q, -1), axis=0)  # MUTATION\n",
       "tests/spec/test_context_vocab.py::test_pick_over_many_tiles_merges_them_in_order_and_leaves_its_tickets_at_zero"),
    _m("context-pick-ticket-kept", "-", "the context tokens' split pick leaves a row's ticket counter raised: the "
       "next launch's merge never runs or runs early", CTX,
       "                tl.atomic_xchg(Tickets + b, 0)  # ready for the next launch (stream order)\n",
       "                pass  # MUTATION\n",
       "tests/spec/test_context_vocab.py::test_pick_over_many_tiles_merges_them_in_order_and_leaves_its_tickets_at_zero"),
    _m("context-row-kept-on-readmission", "-", "a request admitted into a row keeps the context tokens the row's last "
       "request left past its own", CTX,
       "            self.ids[packed[3 * n + 2 * m :]] = -1\n", "            pass  # MUTATION\n",
       "tests/spec/test_context_vocab.py::test_extrapolation_recovers_a_linear_head_and_admit_writes_its_rows"),
    _m("context-observed-never-flushed", "-", "the engine's step leaves the tokens its emits observed queued on the "
       "host: generated tokens never join the rows' context tokens", "updraft/engine/engine.py",
       "            self.spec.flush_observed()\n", "            pass  # MUTATION\n",
       "tests/spec/test_context_vocab.py::test_the_engine_writes_observed_tokens_once_a_step_whatever_the_batch"),
    _m("wrong-stride", "-", "triton's extend kernel gets the head stride as the token stride of the new keys",
       "updraft/attention/triton_kernels/extend.py", "*_two_strides(q), *_two_strides(k_new),",
       "*_two_strides(q), k_new.stride(1), k_new.stride(1),",
       "kit --backend triton --mode EXTEND --runner eager"),
    _m("tree-mask-polarity", "-", "torch_native inverts the tree mask inside the draft block", TN,
       "    return torch.where(in_block[:, None, :], block, torch.ones_like(block))\n",
       "    return torch.where(in_block[:, None, :], ~block, torch.ones_like(block))  # MUTATION\n",
       "kit --backend torch_native --mode TARGET_VERIFY --runner eager"),
    _m("swapped-v1-v2-routing", "-", "the proposer runs the v1 (packed) draft extend when v2 is configured", PROP,
       '        if self.draft_extend == "v2":\n            # All ndt rows',
       '        if self.draft_extend != "v2":  # MUTATION\n            # All ndt rows',
       "kit --backend torch_native --mode 'draft extend v2'"),
    _m("skip-kv-store", "-", "torch_native never writes the new K/V to the pool", TN,
       "        if save_kv:\n            self.kv_pool.store(layer_id, batch.out_cache_loc, k, v)\n",
       "        if False:  # MUTATION\n            self.kv_pool.store(layer_id, batch.out_cache_loc, k, v)\n",
       "kit --backend torch_native --mode EXTEND --runner eager"),
    _m("gqa-head-mapping", "-", "triton's decode kernel maps query head h to KV head h % num_kv_heads (interleaved, not grouped)",
       "updraft/attention/triton_kernels/decode.py", "    heads = kvh * GROUP + rr % GROUP\n",
       "    heads = kvh + (rr % GROUP) * tl.num_programs(1)  # MUTATION\n",
       "kit --backend triton --mode DECODE --runner eager"),
    _m("wrong-page-offset", "-", "the allocator maps position q to offset (q % p) + 1 of its page (spills into the next page)",
       "updraft/memory/pools.py", "pages[q // p] * p + q % p for q in range(start, end))",
       "pages[q // p] * p + q % p + 1 for q in range(start, end))  # MUTATION",
       "tests/memory/test_pools.py", "tests/engine/test_engine.py::test_batch_invariance"),
    _m("merge-wrong-log-base", "-", "triton's split merge weighs partials with exp instead of exp2 (the LSE is base 2)",
       "updraft/attention/triton_kernels/merge.py", "    w = tl.where(live, tl.exp2(lse - mx[:, None]), 0.0)\n",
       "    w = tl.where(live, tl.exp(lse - mx[:, None]), 0.0)  # MUTATION\n",
       f"{TRITON_TESTS}::test_many_active_splits"),
    _m("triton-verify-not-causal", "-", "triton's decode kernel lets every token of a verify block see the whole block",
       "updraft/attention/triton_kernels/decode.py", "    last = tl.maximum(seq - STRIDE, 0) + ti  # the last position row rr may see\n",
       "    last = tl.maximum(seq - STRIDE, 0) + STRIDE - 1 + 0 * ti  # MUTATION\n",
       "kit --backend triton --mode TARGET_VERIFY --runner eager"),
    _m("flex-causal-off-by-one", "-", "flex's causal mask_mod hides a query's own position", "updraft/attention/flex_backend.py",
       "(slot_pos[kv_idx] <= tile_base[b] + q_idx)", "(slot_pos[kv_idx] < tile_base[b] + q_idx)  # MUTATION",
       "kit --backend flex --mode EXTEND --runner eager"),
    _m("triton-extend-causal", "-", "triton's extend kernel hides a new token from itself", "updraft/attention/triton_kernels/extend.py",
       "        allowed = jmask[None, :] & (j[None, :] <= ti[:, None])\n",
       "        allowed = jmask[None, :] & (j[None, :] < ti[:, None])  # MUTATION\n",
       "kit --backend triton --mode EXTEND --runner eager"),
    _m("rejection-without-residual", "-", "rejection sampling resamples a rejected position from p instead of norm(max(p - q, 0))",
       "updraft/spec/verify.py", "    residual = (p_at - q_pad[rows, accepted]).clamp_min(0.0)\n",
       "    residual = p_at.clone()  # MUTATION\n",
       "tests/spec/test_verify.py::test_rejection_sampling_is_lossless"),
    _m("fused-residual-without-q", "-", "the sampled acceptance kernel's residual block sums leave out the draft's q (a rejected position is resampled from p)",
       "updraft/spec/accept_kernel.py", "        r_sum = p_sum - tl.sum(tl.where(inside, corr, 0), axis=0)\n",
       "        r_sum = p_sum  # MUTATION\n",
       "tests/spec/test_rejection_kernels.py::test_draws_follow_residual_and_bonus"),
    _m("accept-ticket-not-reset", "-", "the sampled acceptance's last program leaves its ticket counter up (the next launch's programs draw at the wrong count)",
       "updraft/spec/accept_kernel.py", "            tl.atomic_xchg(counter, 0)  # ready for the next launch (stream order)\n",
       "            pass  # MUTATION\n",
       "tests/spec/test_rejection_kernels.py::test_tickets_end_at_zero_and_a_relaunch_repeats"),
    _m("read-rows-draw-wrong-row", "-", "read_rows draws each batch entry's uniforms from the RNG key of table row b instead of rows[b]",
       "updraft/spec/row_io.py",
       "        uniform_row(Seed, s_seed, Offset, s_offset, row, UOut + b.to(tl.int64) * n_u, stream_c, n_u, BLOCK_U)\n",
       "        uniform_row(Seed, s_seed, Offset, s_offset, b.to(tl.int64), UOut + b.to(tl.int64) * n_u, stream_c, n_u, BLOCK_U)  # MUTATION\n",
       "tests/spec/test_row_io.py::test_read_rows_draws_the_uniforms_bit_for_bit"),
    _m("layout-offset-dropped", "-", "read_rows lays out every segment at the committed length N, ignoring its position offset (the verify block one token late, the chain's steps at one position)",
       "updraft/spec/row_io.py", "        p0 = n + tl.load(Seg + 3 * j + 1)\n", "        p0 = n  # MUTATION\n",
       "tests/spec/test_row_io.py::test_read_rows_lays_out_every_segment"),
    _m("read-rows-norm-unweighted", "-", "read_rows normalises the draft features it gathers without the norm's weight (the first draft's LM head reads them)",
       "updraft/spec/row_io.py", "        w = tl.load(NormW + d, mask=d < D, other=0.0).to(tl.float32)\n",
       "        w = 1.0 + 0.0 * tl.load(NormW + d, mask=d < D, other=0.0).to(tl.float32)  # MUTATION\n",
       "tests/spec/test_row_io.py::test_read_rows_normalises_the_features_as_the_norm_launch"),
    _m("draft-lock-ignored", "-", "the greedy draft pick ignores the lookup assist's lock (the chain's drafts are verified where the lookup's should be)",
       "updraft/spec/sampling_kernels.py", "        arg = tl.where(lock >= 0, lock, arg)\n", "        arg = arg  # MUTATION\n",
       "tests/spec/test_sampling_kernels.py::test_argmax_rows_matches_torch_and_maps_ids",
       "tests/spec/test_fused_beside.py::test_lookup_assist_beside_the_chain_drafts_the_same"),
    _m("extend-rows-kv-unshifted", "-", "the draft extend's rows stored beside the verify take the verify's own tokens, not the next ones (each row's K/V from the token before its draft)",
       FUSED, "            head.store_kv(g.ids.view(-1)[1:], qkv[:m], e, e.positions[:m], e.out_cache_loc[:m])\n",
       "            head.store_kv(g.ids.view(-1)[:m], qkv[:m], e, e.positions[:m], e.out_cache_loc[:m])  # MUTATION\n",
       "tests/spec/test_fused_beside.py::test_extend_rows_beside_drafts_the_same"),
    _m("last-row-pick-first-row", "-", "the draft extend's one-row pick takes each request's first row whatever its accept length",
       "updraft/spec/last_row.py", "    src = b * ndt + k\n", "    src = b * ndt + 0 * k  # MUTATION\n",
       "tests/spec/test_last_row.py::test_pick_matches_the_reference_and_the_definition"),
    _m("accept-pick-token-dropped", "-", "the draft extend's one-row pick writes token 0 in place of the last accepted row's token (the acceptance's pick and the pick launches alike)",
       "updraft/spec/last_row.py", "    tl.store(Ids + b, tok)\n", "    tl.store(Ids + b, tok * 0)  # MUTATION\n",
       "tests/spec/test_last_row.py::test_pick_inside_the_sampled_acceptance"),
    _m("filter-cut-never-run", "-", "the bf16 filter's cut-off rows are skipped by the filter's launch and get no launch of their own (their statistics left unwritten)",
       "updraft/spec/rejection_kernels.py",
       "            if CUT:  # its last launch's work, here (Hist, Acc, Part, Tail: filter_hist.describe's)\n",
       "            if CUT and False:  # MUTATION\n",
       "tests/spec/test_filter_rows.py::test_cut_in_the_filter_launch_equals_its_own_launch"),
    _m("head-pick-slot-kept", "-", "the draft head's pick leaves its slot holding the last step's best (the next step's atomic max competes with it)",
       "updraft/spec/head_pick.py", "    tl.store(Slot + m, tl.full([BLOCK_M], -9223372036854775807 - 1, tl.int64), mask=mm)\n",
       "    tl.store(Slot + m, s, mask=mm)  # MUTATION\n",
       "tests/spec/test_head_pick.py::test_head_pick_is_the_argmax_of_the_logits"),
    _m("head-pick-ties-last-index", "-", "the draft head's pick packs the vocabulary index unflipped: equal logits keep the largest index (torch's argmax keeps the smallest) and the reader decodes another one",
       "updraft/spec/head_pick.py", "    low = (0x7FFFFFFF - n).to(tl.int64)\n", "    low = n.to(tl.int64)  # MUTATION\n",
       "tests/spec/test_head_pick.py::test_head_pick_order_ties_and_negative_logits"),
    _m("extend-reads-stale-ids", "-", "the fused iteration's draft extend reads ids the emitted tokens were not written into (the verify's argmax lands elsewhere)",
       FUSED, "        emitted = e.input_ids.view(bs, ndt)  # the draft extend reads the emitted tokens where they land\n",
       "        emitted = torch.empty_like(e.input_ids.view(bs, ndt))  # MUTATION\n",
       f"{FS}::test_forwards_read_one_layout_and_their_ids_where_they_land"),
    _m("greedy-accept-non-prefix", "-", "greedy acceptance counts matches after the first mismatch", "updraft/spec/verify.py",
       "    accepted = torch.cumprod(match, dim=1).sum(dim=1)\n", "    accepted = match.sum(dim=1)  # MUTATION\n",
       "tests/spec/test_verify.py::test_greedy_accept_counts_leading_matches"),
    _m("ngram-matches-suffix-itself", "-", "the n-gram index includes the current suffix, so lookups find the suffix itself",
       "updraft/spec/ngram.py", "        upto = len(self.tokens) - 1\n", "        upto = len(self.tokens)  # MUTATION\n",
       "tests/spec/test_ngram.py"),
    _m("ngram-device-matches-suffix-itself", "-", "the device n-gram matcher lets a window end at the last position, so it finds the suffix itself",
       NGD, "    m = pos[None, :] < last[:, None].to(torch.int32)\n", "    m = pos[None, :] <= last[:, None].to(torch.int32)  # MUTATION\n",
       "tests/spec/test_ngram_device.py"),
    _m("ngram-history-not-appended", "-", "the fused n-gram iteration no longer appends its emitted tokens to the device history (lookups see the history as admitted)",
       FUSED, "        accept = commit(g.out, rows, n, res, st, ng)\n",
       "        accept = commit(g.out, rows, n, res, st, None)  # MUTATION\n",
       f"{FN}::test_ngram_fused_lossless_and_counters_equal_per_phase", f"{FN}::test_ngram_fused_preemption_rewrites_histories"),
    _m("lookup-assist-sampled-q-kept", "-", "a sampled iteration verifies the lookup's drafts in the assisted rows but accepts them against the head's q",
       FUSED, "            self.ngram.lookup_into(rows, n, ids, assist.min_match, dist)\n",
       "            self.ngram.lookup_into(rows, n, ids, assist.min_match, None)  # MUTATION\n",
       "tests/spec/test_fused.py::test_sampled_lookup_assist_makes_q_one_hot"),
    _m("lookup-kernel-ignores-min-match", "-", "the lookup kernel replaces every row's drafts, however short its match (the assist verifies lookups the head beats)",
       NGD, "    take = jm & (match >= MIN_MATCH)\n", "    take = jm  # MUTATION\n",
       "tests/spec/test_ngram_device.py::test_lookup_kernel_matches_the_torch_matcher"),
    _m("ngram-history-kept-on-readmission", "-", "admitting a request into a row another request wrote last keeps that request's tokens below the synced length",
       NGD, "            start = min(self._synced[row], n) if owner is not None and owner() is r else 0\n",
       "            start = min(self._synced[row], n)  # MUTATION\n",
       f"{FN}::test_ngram_fused_preemption_rewrites_histories", "tests/spec/test_ngram_device.py"),
    _m("fused-padding-row-not-reset", "-", "the fused iteration no longer resets row 0 after its padded rows wrote it (the padding row drifts)",
       COMMIT, "    state.reset_padding()\n", "    pass  # MUTATION\n",
       "tests/spec/test_commit.py", f"kit --backend torch_native --mode '{FUSED_COLUMN}'"),
    _m("commit-kernel-padding-row-not-reset", "-", "the commit kernel (the CUDA path) no longer writes row 0's padding values",
       COMMIT, "    if b == 0:  # the padding row's values (RowState.reset_padding)\n", "    if b == -1:  # MUTATION\n",
       "tests/spec/test_commit.py"),
    _m("commit-kernel-padded-request-writes-row-0", "-", "the commit kernel lets padded requests (on row 0) write the row state, racing its reset",
       COMMIT, "    if row != 0:  # padded requests share row 0: none of them writes it\n", "    if row >= 0:  # MUTATION\n",
       "tests/spec/test_commit.py"),
    # ---- GPU only ----------------------------------------------------------------------------
    # Outputs left in the graph pool: a replay of another graph of the same model (captured
    # earlier) overwrites them. (The former "target and draft share one pool" mutation became
    # unobservable once outputs moved out of the pool, and was retired.)
    _m("gpu-outputs-in-graph-pool", "7", "graph runners return their outputs from the shared graph memory pool instead of copying them into buffers outside it",
       RUNNER, "            view.copy_(src)\n            return view\n",
       "            return src  # MUTATION\n",
       "kit --mode verify --mode 'draft extend v2' --mode 'draft chain' --mode 'draft decode' --runner production",
       "tests/runtime/test_gpu_graphs.py -k real_graphs", device="gpu"),
    _m("gpu-capture-without-warmup", "-", "graphs are captured without warm-up forwards (lazy init, compilation and autotuning inside capture)",
       RUNNER, "            for _ in range(2):  # warm-up: lazy init, autotuning, allocator\n",
       "            for _ in range(0):  # MUTATION\n",
       "kit --runner graph --runner production", "tests/runtime/test_gpu_graphs.py -k real_graphs", device="gpu"),
    # ---- the overlapped iteration's hazards (design note, "The iteration without host stalls")
    _m("o1-results-before-copy", "O1", "the host reads an iteration's results without waiting for their copy to land",
       "updraft/spec/iter_graph.py", "        self.done.synchronize()  # out_host is only valid after this (the copy is asynchronous)\n",
       "        pass  # MUTATION\n",
       f"{FP}::test_plain_overlap_equals_per_step_greedy", f"{FS}::test_fused_stops_inside_accepted_block"),
    _m("o2-lookahead-misses-inflight", "O2", "the lookahead covers the next iteration only, not the one still in flight",
       ENGINE, "            self.lookahead = 2 * self.lookahead + 1\n", "            self.lookahead = self.lookahead  # MUTATION\n",
       f"{FS}::test_fused_lossless_greedy", f"{FP}::test_plain_overlap_equals_per_step_greedy"),
    _m("o2-kv-freed-while-in-flight", "O2", "a request finished or aborted mid-flight frees its KV before the iteration in flight is done",
       ENGINE, "        if self.driver is not None and self.driver.in_flight(req):\n", "        if False:  # MUTATION\n",
       f"{FP}::test_plain_overlap_abort_mid_flight_frees_kv_once", f"{FS}::test_fused_abort_mid_flight_frees_kv_once"),
    _m("o3-rng-offset-frozen", "O3", "the graph no longer advances the rows' RNG offsets (every replay draws the same numbers)",
       COMMIT, "    state.offset[rows] = state.offset[rows] + 1\n", "    state.offset[rows] = state.offset[rows] + 0  # MUTATION\n",
       "tests/spec/test_commit.py", f"{FP}::test_rng_offset_advances_once_per_step"),
    _m("o3-commit-kernel-rng-offset-frozen", "O3", "the commit kernel (the CUDA path) no longer advances the rows' RNG offsets",
       COMMIT, "        tl.store(Offset + row * s_off, tl.load(Offset + row * s_off) + 1)\n",
       "        tl.store(Offset + row * s_off, tl.load(Offset + row * s_off) + 0)  # MUTATION\n",
       "tests/spec/test_commit.py"),
    _m("o4-finished-row-still-emitted", "O4", "results of the iteration in flight are still applied to a request that finished meanwhile",
       ENGINE, "            if req.finished:\n                continue\n            req.num_computed += a\n",
       "            req.num_computed += a  # MUTATION\n",
       f"{FP}::test_plain_overlap_stops_and_max_tokens", f"{FS}::test_fused_stops_inside_accepted_block"),
)


def by_name(names: list[str] | None) -> list[Mutation]:
    """The named mutations (all when ``names`` is empty); unknown names raise ValueError."""
    if not names:
        return list(MUTATIONS)
    known = {m.name: m for m in MUTATIONS}
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown mutation {bad[0]!r}; known: {', '.join(known)}")
    return [known[n] for n in names]
