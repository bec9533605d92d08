"""N-gram (prompt lookup) drafting: match the last n tokens against the request's own history.

Each request keeps an index from n-gram to the end position of its most recent occurrence. The
index lags one position behind the sequence, so looking up the current suffix finds an EARLIER
occurrence, and the tokens that followed it become the drafts. O(n_max) work per new token.
"""

from __future__ import annotations

from collections.abc import Sequence


class NgramIndex:
    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min = n_min
        self.n_max = n_max
        self.tokens: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # n-grams ending before this position are in the index

    def extend(self, tokens: Sequence[int]) -> None:
        self.tokens.extend(tokens)
        # Index n-grams ending at positions < len - 1 (the lag described above).
        upto = len(self.tokens) - 1
        for end in range(self._indexed, upto):
            for n in range(self.n_min, self.n_max + 1):
                start = end - n + 1
                if start < 0:
                    break
                self._index[tuple(self.tokens[start : end + 1])] = end
        self._indexed = max(self._indexed, upto)

    def truncate(self, length: int) -> None:
        """Forget tokens past ``length`` (after preemption the request re-syncs its history)."""
        if length < len(self.tokens):
            self.tokens = self.tokens[:length]
            self._index = {}
            self._indexed = 0
            self.extend([])

    def propose(self, k: int) -> tuple[list[int], bool]:
        """``k`` drafts and whether a match was found. Without a match (or with a short
        continuation) the drafts are padded with the last token; padding is simply rejected."""
        drafts, n = self.lookup(k)
        return drafts, n > 0

    def lookup(self, k: int) -> tuple[list[int], int]:
        """``propose``'s drafts and the length of the suffix they matched (0: none)."""
        toks = self.tokens
        for n in range(min(self.n_max, len(toks)), self.n_min - 1, -1):
            end = self._index.get(tuple(toks[-n:]))
            if end is None:
                continue
            cont = toks[end + 1 : end + 1 + k]
            if cont:
                return cont + [cont[-1]] * (k - len(cont)), n
        last = toks[-1] if toks else 0
        return [last] * k, 0


class RequestHistories:
    """Each request's ``NgramIndex``, brought in step with its tokens before every lookup (the
    host matchers: the per-phase n-gram proposer and lookup assist). A request whose sequence got
    shorter (preempted, then re-prefilled) re-indexes from scratch."""

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self._index: dict[str, NgramIndex] = {}

    def synced(self, request_id: str, prompt_ids: Sequence[int], output_ids: Sequence[int], seq_len: int) -> NgramIndex:
        """The index of the request's tokens (prompt, then output; ``seq_len`` of them)."""
        idx = self._index.get(request_id)
        if idx is None:
            idx = self._index[request_id] = NgramIndex(self.n_min, self.n_max)
        known = len(idx.tokens)
        if known > seq_len:
            idx.truncate(seq_len)
            known = seq_len
        if known < len(prompt_ids):
            idx.extend(prompt_ids[known:])
            known = len(prompt_ids)
        idx.extend(output_ids[known - len(prompt_ids) :])
        return idx

    def release(self, request_id: str) -> None:
        self._index.pop(request_id, None)

    def __len__(self) -> int:
        return len(self._index)
