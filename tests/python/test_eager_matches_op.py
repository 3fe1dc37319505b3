"""Plain eager calls take a shortcut past the custom ops (_torch_eager.py: no dispatch, lse
and rng_state skipped when nothing needs them). Every route must give the custom op's
results bit for bit: the forward without gradients, forward and backward (with and
without dropout, same generator state), varlen, and the KV cache, on the CPU and, where
there is one, on the GPU."""
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from flashattn import _torch_eager  # noqa: E402

_cuda = torch.cuda.is_available() and flashattn.cuda_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _cuda, reason="needs a GPU and a flashattn build with CUDA"))]


def _dtype(device):
    return torch.bfloat16 if device == "cuda" else torch.float32


def _make(device, *shape, requires_grad=False):
    return torch.randn(*shape, dtype=_dtype(device), device=device, requires_grad=requires_grad)


def _op(q, k, v, causal, dropout_p=0.0, varlen=None):
    cu_q = cu_k = None
    max_q = max_k = 0
    if varlen is not None:
        cu_q, cu_k, max_q, max_k = varlen
    # deterministic: the CUDA backward's dq otherwise sums in atomic order.
    return torch.ops.flashattn.forward(q, k, v, cu_q, cu_k, None, max_q, max_k, dropout_p,
                                       q.shape[-1] ** -0.5, causal, -1, 0 if causal else -1,
                                       0.0, None, True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("causal", [False, True])
def test_inference_forward(device, causal):
    torch.manual_seed(1)
    q, k, v = _make(device, 2, 37, 4, 64), _make(device, 2, 45, 2, 64), _make(device, 2, 45, 2, 64)
    assert _torch_eager.applies(q, k, v)
    out = flashattn.flash_attn_func(q, k, v, causal=causal)  # no lse allocated
    assert torch.equal(out, _op(q, k, v, causal)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_forward_and_backward(device, dropout_p):
    torch.manual_seed(2)
    q, k, v = (_make(device, 2, 33, 4, 72, requires_grad=True) for _ in range(3))
    dout = _make(device, 2, 33, 4, 72)
    torch.manual_seed(3)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, dropout_p=dropout_p, causal=True,
                                            deterministic=True, return_attn_probs=True)
    torch.manual_seed(3)
    op_out, op_lse, _ = _op(q, k, v, True, dropout_p)
    assert torch.equal(out, op_out) and torch.equal(lse, op_lse)
    got = torch.autograd.grad(out, (q, k, v), dout)
    want = torch.autograd.grad(op_out, (q, k, v), dout)
    for name, a, b in zip("qkv", got, want):
        assert torch.equal(a, b), f"d{name} differs"
    # Without return_attn_probs the eager path keeps no rng_state when there is no dropout.
    torch.manual_seed(3)
    plain = flashattn.flash_attn_func(q, k, v, dropout_p=dropout_p, causal=True,
                                      deterministic=True)
    assert torch.equal(plain, out)
    for name, a, b in zip("qkv", torch.autograd.grad(plain, (q, k, v), dout), want):
        assert torch.equal(a, b), f"d{name} differs without return_attn_probs"


@pytest.mark.parametrize("device", DEVICES)
def test_varlen_forward(device):
    torch.manual_seed(4)
    lengths = [5, 17, 1, 30]
    cu = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32,
                      device=device)
    total = sum(lengths)
    q, k, v = _make(device, total, 4, 64), _make(device, total, 1, 64), _make(device, total, 1, 64)
    out = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths),
                                           causal=True)
    assert torch.equal(out, _op(q, k, v, True, varlen=(cu, cu, max(lengths), max(lengths)))[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("append", [False, True])
def test_kvcache(device, return_lse, append):
    torch.manual_seed(5)
    batch, capacity, heads, heads_k, dim = 2, 300, 8, 2, 128
    q = _make(device, batch, 1, heads, dim)
    caches = [(_make(device, batch, capacity, heads_k, dim),
               _make(device, batch, capacity, heads_k, dim))]
    caches.append(tuple(c.clone() for c in caches[0]))
    seqlens = torch.tensor([299, 77] if append else [300, 77], dtype=torch.int32, device=device)
    k_new = _make(device, batch, 1, heads_k, dim) if append else None
    v_new = _make(device, batch, 1, heads_k, dim) if append else None
    (k_cache, v_cache), (op_k_cache, op_v_cache) = caches
    got = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                            cache_seqlens=seqlens, causal=True,
                                            return_softmax_lse=return_lse)
    op_out, op_lse = torch.ops.flashattn.forward_kvcache(
        q, op_k_cache, op_v_cache, k_new, v_new, None, None, seqlens, None, None, None,
        dim ** -0.5, True, -1, 0, 0.0, True, None, 0)
    out = got[0] if return_lse else got
    assert torch.equal(out, op_out)
    if return_lse:
        assert torch.equal(got[1], op_lse)
    assert torch.equal(k_cache, op_k_cache) and torch.equal(v_cache, op_v_cache)
