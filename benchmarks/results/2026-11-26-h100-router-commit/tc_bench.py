"""topk_rows + choose vs topk_choose; commit kernel vs torch (CUDA graphs of 20 calls, us a call)."""
import torch
from updraft.ops.gemv_config import graph_seconds
from updraft.runtime.row_state import RowState
from updraft.spec import commit as cm
from updraft.spec import sampling_kernels as sk

dev = "cuda"
for b in (1, 8):
    x = torch.randn(b, 8192, device=dev).to(torch.bfloat16)
    d2t = torch.randint(0, 1000, (8192,), device=dev)
    temp = torch.full((b,), 0.7, device=dev); tk = torch.zeros(b, device=dev)
    tp = torch.full((b,), 0.9, device=dev); mp = torch.zeros(b, device=dev)
    u = torch.rand(b, device=dev)
    q = torch.empty(b, 64, device=dev); ids = torch.empty(b, 64, dtype=torch.long, device=dev)

    def two():
        v, c = sk.topk_rows(x, 64, target=(d2t, True))
        sk.choose(v, temp, tk, tp, mp, u, ids=c, out=(q, ids))

    def one():
        sk.topk_choose(x, 64, temp, tk, tp, mp, u, out=(q, ids), target=(d2t, True))

    def topk_only():
        sk.topk_rows(x, 64, target=(d2t, True))
    for f in (two, one, topk_only):
        f()
    torch.cuda.synchronize()
    print(f"bs {b}: topk+choose {graph_seconds(two, 20)*1e6:.1f} us, topk_choose {graph_seconds(one, 20)*1e6:.1f} us, "
          f"topk alone {graph_seconds(topk_only, 20)*1e6:.1f} us")
    st = RowState(16, torch.device(dev))
    rows = torch.arange(1, b + 1, device=dev)
    n = st.seq_len[rows]
    em = torch.randint(0, 100, (b, 6), device=dev)
    res = cm.Commit(em, em[:, :5], None, torch.randn(b * 6, 576, device=dev).to(torch.bfloat16),
                    torch.zeros(16, 576, device=dev, dtype=torch.bfloat16))
    out = torch.empty(b, 7, dtype=torch.long, device=dev)
    ker = lambda: cm.commit(out, rows, n, res, st)  # noqa: E731
    ref = lambda: cm.commit_torch(out, rows, n, res, st)  # noqa: E731
    ker(); ref(); torch.cuda.synchronize()
    print(f"bs {b}: commit kernel {graph_seconds(ker, 20)*1e6:.1f} us, torch {graph_seconds(ref, 20)*1e6:.1f} us")
