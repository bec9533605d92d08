"""Data shipped with updraft: the training prompt generator for draft heads (``prompts``) and
its word lists (``material``)."""
