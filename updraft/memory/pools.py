"""Request-to-token table, paged KV pool and the page allocator.

Layout:

* ``ReqToTokenPool.req_to_token`` is ``[max_reqs + 1, width]`` int32. Row 0 is reserved and stays
  all zeros: padded graph rows use it, so they only ever touch slot 0. ``width`` is the context
  length plus the speculative lookahead (failure class 11: a request at exactly max context still
  needs room for ndt lookahead slots).
* KV slots are flat: slot ``s`` of layer ``l`` is ``k_buffer[l][s]``, shaped
  ``[num_slots, kv_heads, head_dim]``. Slots are handed out in pages of ``page_size``
  consecutive slots; position ``p`` of a request lives in its ``p // page_size``-th page at offset
  ``p % page_size``. Page 0 (slots ``0 .. page_size-1``) is never allocated: slot 0 is the scratch
  slot for padded writes.
* ``PagedAllocator`` owns the free page list and the pages of each request row. Writing the table
  happens at allocation time, so a forward reads ``out_cache_loc`` straight from the table.
"""

from __future__ import annotations

import torch


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
    """Per-layer K and V buffers over flat slots (``num_pages * page_size`` of them)."""

    def __init__(
        self,
        num_layers: int,
        num_pages: int,
        page_size: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if num_pages < 2:
            raise ValueError(f"the KV pool needs at least 2 pages (one is scratch), got {num_pages}")
        self.num_layers = num_layers
        self.num_pages = num_pages
        self.page_size = page_size
        self.num_slots = num_pages * page_size
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        shape = (self.num_slots, kv_heads, head_dim)
        # Zero-filled so the scratch slot read by padded rows is finite.
        self.k_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]
        self.v_buffer = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(num_layers)]

    @staticmethod
    def bytes_per_token(num_layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * kv_heads * head_dim * torch.empty(0, dtype=dtype).element_size()

    def store(self, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Write new K/V rows ([T, kv_heads, head_dim]) to slots ``loc`` ([T])."""
        self.k_buffer[layer][loc] = k.to(self.dtype)
        self.v_buffer[layer][loc] = v.to(self.dtype)


class PagedAllocator:
    """Page allocator. Each request row holds a list of pages covering its allocated positions."""

    def __init__(self, req_pool: ReqToTokenPool, num_pages: int, page_size: int) -> None:
        self.req_pool = req_pool
        self.page_size = page_size
        self.num_pages = num_pages
        # Page 0 is the scratch page and is never handed out.
        self._free_pages: list[int] = list(range(num_pages - 1, 0, -1))
        self._pages: dict[int, list[int]] = {}
        self._alloc_len: dict[int, int] = {}

    @property
    def num_free_pages(self) -> int:
        return len(self._free_pages)

    @property
    def capacity_tokens(self) -> int:
        return (self.num_pages - 1) * self.page_size

    @property
    def used_tokens(self) -> int:
        return (self.num_pages - 1 - len(self._free_pages)) * self.page_size

    def allocated_len(self, row: int) -> int:
        return self._alloc_len.get(row, 0)

    def pages_needed(self, row: int | None, new_len: int) -> int:
        """Extra pages that ``ensure(row, new_len)`` would take."""
        have = len(self._pages.get(row, ())) if row is not None else 0
        need = -(-new_len // self.page_size)
        return max(0, need - have)

    def can_ensure(self, row: int | None, new_len: int) -> bool:
        return self.pages_needed(row, new_len) <= len(self._free_pages)

    def ensure(self, row: int, new_len: int) -> bool:
        """Make positions ``[0, new_len)`` of ``row`` backed by slots and write them to the table.

        Returns False (and changes nothing) when not enough pages are free.
        """
        return self.ensure_batch([row], [new_len])

    def ensure_batch(self, rows: list[int], new_lens: list[int]) -> bool:
        """``ensure`` for several rows at once with one table write; all or nothing."""
        width = self.req_pool.width
        extra_total = 0
        for row, n in zip(rows, new_lens):
            if n > width:
                raise ValueError(f"request needs {n} KV positions but the table is {width} wide")
            extra_total += self.pages_needed(row, n)
        if extra_total > len(self._free_pages):
            return False
        p = self.page_size
        w_rows: list[int] = []
        w_pos: list[int] = []
        w_slots: list[int] = []
        for row, n in zip(rows, new_lens):
            pages = self._pages.setdefault(row, [])
            old = self._alloc_len.get(row, 0)
            for _ in range(self.pages_needed(row, n)):
                pages.append(self._free_pages.pop())
            if n > old:
                w_rows.extend([row] * (n - old))
                w_pos.extend(range(old, n))
                w_slots.extend(pages[q // p] * p + q % p for q in range(old, n))
                self._alloc_len[row] = n
        if w_rows:
            # One packed copy, non-blocking from pinned memory on CUDA: a blocking copy would
            # wait for every queued kernel, i.e. for the speculative iteration in flight.
            dev = self.req_pool.device
            packed = torch.tensor([w_rows, w_pos, w_slots], dtype=torch.int64)
            if dev.type == "cuda":
                packed = packed.pin_memory()
            packed = packed.to(dev, non_blocking=True)
            self.req_pool.req_to_token[packed[0], packed[1]] = packed[2].to(torch.int32)
        return True

    def free(self, row: int) -> None:
        """Return every page of ``row`` and clear its table row (stale slots must not survive)."""
        pages = self._pages.pop(row, [])
        n = self._alloc_len.pop(row, 0)
        self._free_pages.extend(reversed(pages))
        if n:
            self.req_pool.req_to_token[row, :n] = 0

    def slots_of(self, row: int) -> torch.Tensor:
        return self.req_pool.req_to_token[row, : self._alloc_len.get(row, 0)]

    def check_consistency(self) -> None:
        """Every page is either free or owned by exactly one row; slot 0's page is never owned."""
        owned = [p for pages in self._pages.values() for p in pages]
        all_pages = owned + self._free_pages
        if len(all_pages) != len(set(all_pages)):
            raise AssertionError("a page is owned twice or both owned and free")
        if set(all_pages) != set(range(1, self.num_pages)):
            raise AssertionError("pages leaked or invented")
        for row, pages in self._pages.items():
            n = self._alloc_len.get(row, 0)
            if len(pages) != -(-n // self.page_size):
                raise AssertionError(f"row {row}: {len(pages)} pages for {n} positions")
        if bool((self.req_pool.req_to_token[0] != 0).any()):
            raise AssertionError("padding row 0 of req_to_token was written")
