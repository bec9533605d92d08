"""KV memory: request-to-token table, paged KV pool, allocator."""

from updraft.memory.pools import KVPool, PagedAllocator, ReqToTokenPool

__all__ = ["KVPool", "PagedAllocator", "ReqToTokenPool"]
