"""Request-to-token table, paged KV pool and the page allocator.

Layout:

* ``ReqToTokenPool.req_to_token`` is ``[max_reqs + 1, width]`` int32. Row 0 is reserved and stays
  all zeros: padded graph rows use it, so they only ever touch slot 0. ``width`` is the context
  length plus the speculative lookahead (failure class 11: a request at exactly max context still
  needs room for ndt lookahead slots).
* KV slots are flat: slot ``s`` of layer ``l`` is ``k_buffer[l][s]``, shaped
  ``[num_slots, kv_heads, head_dim]``; ``v_buffer[l]`` is ``[num_slots, kv_heads, v_head_dim]``.
  MLA (DeepSeek) caches one latent row per token and reads V as its first ``v_head_dim``
  columns: with ``shared_kv`` there is no V storage, ``v_buffer[l]`` is a strided view of
  ``k_buffer[l][..., :v_head_dim]`` and ``store`` writes K only. Slots are handed out in pages of ``page_size``
  consecutive slots; position ``p`` of a request lives in its ``p // page_size``-th page at offset
  ``p % page_size``. Page 0 (slots ``0 .. page_size-1``) is never allocated: slot 0 is the scratch
  slot for padded writes.
* ``PagedAllocator`` owns the free page list and the pages of each request row. Writing the table
  happens at allocation time, so a forward reads ``out_cache_loc`` straight from the table.
"""

from __future__ import annotations

import torch

from updraft.memory.table_writer import TableWriter


class ReqToTokenPool:
    """Rows of the request -> KV slot table. Row 0 is the reserved padding row."""

    def __init__(self, max_reqs: int, width: int, device: torch.device | str) -> None:
        if max_reqs < 1:
            raise ValueError(f"max_reqs must be >= 1, got {max_reqs}")
        if width < 1:
            raise ValueError(f"width must be >= 1, got {width}")
        self.max_reqs = max_reqs
        self.width = width
        self.device = torch.device(device)
        self.req_to_token = torch.zeros(max_reqs + 1, width, dtype=torch.int32, device=self.device)
        self._free: list[int] = list(range(max_reqs, 0, -1))  # pop() hands out 1, 2, ...

    @property
    def num_free(self) -> int:
        return len(self._free)

    def alloc(self) -> int | None:
        return self._free.pop() if self._free else None

    def free(self, row: int) -> None:
        if row <= 0 or row > self.max_reqs:
            raise ValueError(f"cannot free request row {row}: rows are 1..{self.max_reqs}")
        if row in self._free:
            raise ValueError(f"request row {row} freed twice")
        self._free.append(row)


class KVPool:
    """Per-layer K and V buffers over flat slots (``num_pages * page_size`` of them).

    ``v_head_dim``: V's width (default ``head_dim``). ``shared_kv``: V is the first
    ``v_head_dim`` columns of K (MLA's latent cache); nothing is stored for V, and a backend
    that writes V separately must not (``store`` skips it)."""

    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        page_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
        *,
        v_head_dim: int | None = None,
        shared_kv: bool = False,
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if num_pages < 2:
            raise ValueError(f"the KV pool needs at least 2 pages (one is scratch), got {num_pages}")
        v_head_dim = head_dim if v_head_dim is None else v_head_dim
        if v_head_dim < 1 or (shared_kv and v_head_dim > head_dim):
            raise ValueError(
                f"v_head_dim={v_head_dim} must be >= 1 (and <= head_dim={head_dim} with shared_kv)"
            )
        self.num_layers = num_layers
        self.num_pages = num_pages
        self.page_size = page_size
        self.num_slots = num_pages * page_size
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.v_head_dim = v_head_dim
        self.shared_kv = shared_kv
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (self.num_slots, kv_heads, head_dim)
        # Zero-filled so the scratch slot read by padded rows is finite.
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        if shared_kv:
            self.v_buffer = [k[..., :v_head_dim] for k in self.k_buffer]
        else:
            v_shape = (self.num_slots, kv_heads, v_head_dim)
            self.v_buffer = [torch.zeros(v_shape, dtype=dtype, device=self.device) for _ in range(num_layers)]

    @staticmethod
    def bytes_per_token(
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        *,
        v_head_dim: int | None = None,
        shared_kv: bool = False,
    ) -> int:
        v = 0 if shared_kv else (head_dim if v_head_dim is None else v_head_dim)
        return num_layers * kv_heads * (head_dim + v) * torch.empty(0, dtype=dtype).element_size()

    def store(self, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write new K/V rows ([T, kv_heads, head_dim] / [T, kv_heads, v_head_dim]) to slots
        ``loc`` ([T]); with ``shared_kv`` only K (V is its leading columns)."""
        self.k_buffer[layer][loc] = k.to(self.dtype)
        if not self.shared_kv:
            self.v_buffer[layer][loc] = v.to(self.dtype)


class PagedAllocator:
    """Page allocator. Each request row holds a list of pages covering its requested positions.

    Growing rows take ``ahead`` positions' worth of pages more than asked for, while the free
    list has them, so that most steps of a decoding request need no allocation and no table
    write (a speculative step grows every request by up to S + 1 positions). Those pages are
    *slack*: every decision (``num_free_pages``, ``pages_needed``, ``ensure``'s all-or-nothing
    check) counts them as free, so admission and preemption are the same as without them, and
    a row that needs pages when the free list is short takes them from other rows' slack.

    Hazard: slack is only ever taken from beyond a row's requested length. Requested lengths
    only grow while a row lives, and an iteration in flight writes below the length requested
    before it was launched, so reclaimed pages are never ones an in-flight iteration writes.
    """

    def __init__(self, req_pool: ReqToTokenPool, num_pages: int, page_size: int, ahead: int = 0) -> None:
        self.req_pool = req_pool
        self.page_size = page_size
        self.num_pages = num_pages
        self.ahead_pages = -(-ahead // page_size)
        # Page 0 is the scratch page and is never handed out.
        self._free_pages: list[int] = list(range(num_pages - 1, 0, -1))
        self._pages: dict[int, list[int]] = {}
        rows = req_pool.max_reqs + 1
        self._want = [0] * rows  # requested positions per row
        self._cap = [0] * rows  # positions whose slots are in the table (held pages, capped at the width)
        self._exact_pages = 0  # pages the requested positions need, summed over rows
        self.table_writer = TableWriter(req_pool.req_to_token)

    @property
    def num_free_pages(self) -> int:
        """Pages free for new requests and growth: the free list plus every row's slack."""
        return self.num_pages - 1 - self._exact_pages

    @property
    def capacity_tokens(self) -> int:
        return (self.num_pages - 1) * self.page_size

    @property
    def used_tokens(self) -> int:
        return self._exact_pages * self.page_size

    def allocated_len(self, row: int) -> int:
        return self._want[row]

    def pages_needed(self, row: int | None, new_len: int) -> int:
        """Extra pages that ``ensure(row, new_len)`` would take."""
        p = self.page_size
        have = -(-self._want[row] // p) if row is not None else 0
        return max(0, -(-new_len // p) - have)

    def pages_needed_batch(self, rows: list[int], new_lens: list[int]) -> int:
        """``pages_needed`` summed over rows (one call per step instead of one per request)."""
        p, want = self.page_size, self._want
        return sum(max(0, -(-n // p) + (want[r] // -p)) for r, n in zip(rows, new_lens))

    def can_ensure(self, row: int | None, new_len: int) -> bool:
        return self.pages_needed(row, new_len) <= self.num_free_pages

    def ensure(self, row: int, new_len: int) -> bool:
        """Make positions ``[0, new_len)`` of ``row`` backed by slots and write them to the table.

        Returns False (and changes nothing) when not enough pages are free.
        """
        return self.ensure_batch([row], [new_len])

    def ensure_batch(self, rows: list[int], new_lens: list[int]) -> bool:
        """``ensure`` for several rows at once with one table write; all or nothing."""
        p, want, cap = self.page_size, self._want, self._cap
        width = self.req_pool.width
        grow: list[tuple[int, int]] = []
        extra = 0
        for row, n in zip(rows, new_lens):
            w = want[row]
            if n <= w:
                continue
            if n > width:
                raise ValueError(f"request needs {n} KV positions but the table is {width} wide")
            grow.append((row, n))
            extra += -(-n // p) + (w // -p)
        if extra > self.num_free_pages:
            return False
        self._exact_pages += extra
        short: list[int] = []
        for row, n in grow:
            want[row] = n
            if n > cap[row]:
                short.append(row)
        if short:
            self._take_pages(short)
        return True

    def _take_pages(self, rows: list[int]) -> None:
        """Back each row's requested positions with pages, then give each slack while the free
        list lasts, and write the new slots to the table in one packed copy."""
        p, want, cap = self.page_size, self._want, self._cap
        width = self.req_pool.width
        fp = self._free_pages
        pages_of = [self._pages.setdefault(row, []) for row in rows]
        # Every row first takes exactly what it needs. Reclaiming can only trim other rows: these
        # need all of their pages (their requested length is beyond their capacity). No slack
        # is handed out before every need is met, so none of it is reclaimed while its table
        # write is still pending below.
        for pages, row in zip(pages_of, rows):
            need = -(-want[row] // p) - len(pages)
            if need > len(fp):
                self._reclaim(need - len(fp))
            pages.extend(fp[: -need - 1 : -1])  # the order pop() would give: 1, 2, ... first
            del fp[-need:]
        max_pages = -(-width // p)
        w_rows: list[int] = []
        w_pos: list[int] = []
        w_slots: list[int] = []
        for pages, row in zip(pages_of, rows):
            extra = min(self.ahead_pages, max_pages - len(pages), len(fp))
            if extra > 0:
                pages.extend(fp[: -extra - 1 : -1])
                del fp[-extra:]
            start, end = cap[row], min(len(pages) * p, width)
            w_rows.extend([row] * (end - start))
            w_pos.extend(range(start, end))
            if p == 1:
                w_slots.extend(pages[start:end])
            else:
                w_slots.extend(pages[q // p] * p + q % p for q in range(start, end))
            cap[row] = end
        # One packed copy, non-blocking from pinned staging on CUDA: a blocking copy would
        # wait for every queued kernel, i.e. for the speculative iteration in flight.
        self.table_writer.write(w_rows, w_pos, w_slots)

    def _reclaim(self, count: int) -> None:
        """Move at least ``count`` slack pages of rows back to the free list."""
        p = self.page_size
        rows: list[int] = []
        cols: list[int] = []
        for row, pages in self._pages.items():
            keep = -(-self._want[row] // p)
            if len(pages) > keep:
                count -= len(pages) - keep
                self._free_pages.extend(reversed(pages[keep:]))
                del pages[keep:]
                start, end = min(keep * p, self.req_pool.width), self._cap[row]
                rows.extend([row] * (end - start))
                cols.extend(range(start, end))
                self._cap[row] = start
                if count <= 0:
                    break
        # Reclaimed slots now belong to other rows: no stale table entry may point at them.
        self.table_writer.write(rows, cols, [0] * len(rows))

    def free(self, row: int) -> None:
        """Return every page of ``row`` and clear its table row (stale slots must not survive)."""
        pages = self._pages.pop(row, [])
        self._exact_pages -= -(-self._want[row] // self.page_size)
        n = self._cap[row]
        self._want[row] = self._cap[row] = 0
        self._free_pages.extend(reversed(pages))
        if n:
            self.req_pool.req_to_token[row, :n] = 0

    def slots_of(self, row: int) -> torch.Tensor:
        return self.req_pool.req_to_token[row, : self._want[row]]

    def check_consistency(self) -> None:
        """Every page is either free or owned by exactly one row; slot 0's page is never owned;
        each row holds at least the pages of its requested length, and the table holds exactly
        its pages' slots up to its capacity, zeros beyond."""
        owned = [p for pages in self._pages.values() for p in pages]
        all_pages = owned + self._free_pages
        if len(all_pages) != len(set(all_pages)):
            raise AssertionError("a page is owned twice or both owned and free")
        if set(all_pages) != set(range(1, self.num_pages)):
            raise AssertionError("pages leaked or invented")
        p, width = self.page_size, self.req_pool.width
        exact = 0
        for row in range(len(self._want)):
            pages, n = self._pages.get(row, []), self._want[row]
            exact += -(-n // p)
            if len(pages) < -(-n // p) or self._cap[row] != min(len(pages) * p, width) or self._cap[row] < n:
                raise AssertionError(f"row {row}: {len(pages)} pages, capacity {self._cap[row]} for {n} positions")
            table = self.req_pool.req_to_token[row].tolist()
            expect = [pages[q // p] * p + q % p for q in range(self._cap[row])]
            if table[: self._cap[row]] != expect or any(table[self._cap[row] :]):
                raise AssertionError(f"row {row}: table does not match its pages")
        if exact != self._exact_pages:
            raise AssertionError(f"requested pages {exact} != counted {self._exact_pages}")
        if bool((self.req_pool.req_to_token[0] != 0).any()):
            raise AssertionError("padding row 0 of req_to_token was written")
