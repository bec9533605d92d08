"""The attention test kit: every attention backend, in every forward mode, eagerly and under
graphs, against an independent float64 reference; the engine's own graph runners against their
eager paths; and a mutation campaign that proves the checks catch the bugs they are meant for.

Modules:

* ``cases``: ``AttnCase`` (a test case as data) and the sweeps / tiers (``eager_cases``,
  ``graph_cases``).
* ``harness``: pool, table and tensors of a case (KV slot layouts, poisoned pool), the eager run,
  the comparison with ``updraft.attention.reference``.
* ``graph_harness``: the ``graph-metadata`` and ``graph`` runner modes through the production
  ``PhaseGraphRunner`` (pad styles, capture multiples, poisoned static inputs, KV and metadata
  invariants).
* ``tiny`` / ``runner_harness``: a tiny random engine (target + EAGLE head) and the production
  runner checks (draft decode, draft chain, draft extend v1 / v2, verify: graph vs eager).
* ``fused_harness``: the ``fused iteration`` column (``FusedIteration``'s graph vs its eager body
  and the per-phase path).
* ``matrix`` / ``report``: the backends x columns matrix, its markdown, KNOWN_FAILURES.md.
* ``mutations`` / ``mutate``: the mutation campaign (data and runner).
* ``cli``: ``updraft kit run | report | mutate``.

Nothing here is imported by the engine; importing ``updraft.kit`` is cheap.
"""
