"""The flash_attn functions on torch CPU tensors: values and gradients against a float64
torch oracle, the custom ops under opcheck and torch.compile, dropout seeding."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
import reference_torch as ref  # noqa: E402

TOLERANCE = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _inputs(batch=2, seqlen_q=19, seqlen_k=27, heads=4, heads_k=2, dim=16,
            dtype=torch.float32, device="cpu", requires_grad=True):
    make = lambda *shape: torch.randn(*shape, dtype=dtype, device=device,
                                      requires_grad=requires_grad)
    return (make(batch, seqlen_q, heads, dim), make(batch, seqlen_k, heads_k, dim),
            make(batch, seqlen_k, heads_k, dim))


def _assert_close(actual, expected, dtype=torch.float32, scale=1.0):
    error = (actual.double() - expected.double()).abs().max().item()
    assert error <= TOLERANCE[dtype] * scale, f"max abs error {error}"


def _grads(output, inputs, dout):
    return torch.autograd.grad(output, inputs, dout)


@pytest.mark.parametrize("options", [
    dict(), dict(causal=True), dict(window_size=(4, 2)), dict(softcap=3.0, causal=True),
    dict(alibi_slopes=torch.tensor([0.5, 0.25, 0.1, 0.05])), dict(softmax_scale=0.2),
], ids=["full", "causal", "window", "softcap", "alibi", "scale"])
def test_values_and_gradients(options):
    torch.manual_seed(0)
    q, k, v = _inputs()
    out = flashattn.flash_attn_func(q, k, v, **options)
    reference_options = dict(options)
    reference_options["window"] = reference_options.pop("window_size", (-1, -1))
    expected = ref.attention(q, k, v, **reference_options)
    _assert_close(out, expected)
    dout = torch.randn_like(out)
    for grad, want in zip(_grads(out, (q, k, v), dout), _grads(expected, (q, k, v), dout)):
        _assert_close(grad, want, scale=5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_forward_and_backward(dtype):
    torch.manual_seed(1)
    q, k, v = _inputs(dtype=dtype)
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert out.dtype == dtype
    expected = ref.attention(q, k, v, causal=True)
    _assert_close(out, expected, dtype)
    dout = torch.randn_like(out)
    for grad, want in zip(_grads(out, (q, k, v), dout), _grads(expected, (q, k, v), dout)):
        assert grad.dtype == dtype
        _assert_close(grad, want, dtype, scale=5)


def test_packed_functions_gradients():
    torch.manual_seed(2)
    qkv = torch.randn(2, 15, 3, 4, 8, requires_grad=True)
    out = flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
    expected = ref.attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    _assert_close(out, expected)
    dout = torch.randn_like(out)
    _assert_close(*_grads(out, qkv, dout), *_grads(expected, qkv, dout), scale=5)

    q = torch.randn(2, 11, 4, 8, requires_grad=True)
    kv = torch.randn(2, 15, 2, 2, 8, requires_grad=True)
    out = flashattn.flash_attn_kvpacked_func(q, kv)
    expected = ref.attention(q, kv[:, :, 0], kv[:, :, 1])
    dout = torch.randn_like(out)
    for grad, want in zip(_grads(out, (q, kv), dout), _grads(expected, (q, kv), dout)):
        _assert_close(grad, want, scale=5)


def test_varlen_gradients():
    torch.manual_seed(3)
    seqlens_q, seqlens_k = [3, 8, 1], [5, 8, 9]
    cu = lambda lens: torch.tensor([0] + list(np.cumsum(lens)), dtype=torch.int32)
    cu_q, cu_k = cu(seqlens_q), cu(seqlens_k)
    q = torch.randn(12, 4, 8, requires_grad=True)
    k = torch.randn(22, 2, 8, requires_grad=True)
    v = torch.randn(22, 2, 8, requires_grad=True)
    out, lse, _ = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 8, 9, causal=True,
                                                   return_attn_probs=True)
    assert lse.shape == (4, 12)
    pieces = [ref.attention(q[None, cu_q[b]:cu_q[b + 1]], k[None, cu_k[b]:cu_k[b + 1]],
                            v[None, cu_k[b]:cu_k[b + 1]], causal=True)[0] for b in range(3)]
    expected = torch.cat(pieces)
    _assert_close(out, expected)
    dout = torch.randn_like(out)
    for grad, want in zip(_grads(out, (q, k, v), dout), _grads(expected, (q, k, v), dout)):
        _assert_close(grad, want, scale=5)


def test_numpy_and_torch_agree():
    torch.manual_seed(4)
    q, k, v = _inputs(requires_grad=False)
    from_torch = flashattn.flash_attn_func(q, k, v, causal=True).numpy()
    from_numpy = flashattn.flash_attn_func(q.numpy(), k.numpy(), v.numpy(), causal=True)
    np.testing.assert_array_equal(from_torch, from_numpy)


def test_dropout_state_is_drawn_on_the_device_of_q():
    """(seed, offset) come from torch's generator of q's device into an int64 [2] tensor there,
    which the library reads when the call runs (so a CUDA graph replays with fresh ones)."""
    q, k, v = _inputs(seqlen_q=9, seqlen_k=13)
    torch.manual_seed(12)
    _, _, rng_state = torch.ops.flashattn.forward(q, k, v, None, None, None, 0, 0, 0.25, 0.5,
                                                  False, -1, -1, 0.0, None, False)
    assert rng_state.shape == (2,) and rng_state.dtype == torch.int64
    assert rng_state.device == q.device
    torch.manual_seed(12)
    assert torch.equal(rng_state, torch.empty(2, dtype=torch.int64).random_())


def test_dropout_is_seeded_by_torch_and_backward_uses_the_same_mask():
    q, k, v = _inputs(seqlen_q=9, seqlen_k=13)
    torch.manual_seed(7)
    out, _, probs = flashattn.flash_attn_func(q, k, v, dropout_p=0.25, return_attn_probs=True)
    torch.manual_seed(7)
    again = flashattn.flash_attn_func(q, k, v, dropout_p=0.25)
    assert torch.equal(out, again)
    assert not torch.equal(out, flashattn.flash_attn_func(q, k, v, dropout_p=0.25))
    keep = ~torch.signbit(probs[:, :, :9, :13])
    expected = ref.attention(q, k, v, keep=keep, dropout_p=0.25)
    _assert_close(out, expected)
    dout = torch.randn_like(out)
    for grad, want in zip(_grads(out, (q, k, v), dout), _grads(expected, (q, k, v), dout)):
        _assert_close(grad, want, scale=5)


def test_deterministic_backward_is_bitwise_reproducible():
    torch.manual_seed(8)
    q, k, v = _inputs()
    dout = torch.randn(q.shape)
    first = _grads(flashattn.flash_attn_func(q, k, v, deterministic=True), (q, k, v), dout)
    second = _grads(flashattn.flash_attn_func(q, k, v, deterministic=True), (q, k, v), dout)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_kvcache_appends_in_place():
    torch.manual_seed(9)
    k_cache, v_cache = torch.randn(2, 32, 2, 8), torch.randn(2, 32, 2, 8)
    q, k, v = torch.randn(2, 2, 4, 8), torch.randn(2, 2, 2, 8), torch.randn(2, 2, 2, 8)
    seqlens = torch.tensor([4, 20], dtype=torch.int32)
    out, lse = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v,
                                                 cache_seqlens=seqlens, causal=True,
                                                 return_softmax_lse=True)
    assert torch.equal(k_cache[1, 20:22], k[1]) and torch.equal(v_cache[0, 4:6], v[0])
    for b, n in enumerate(seqlens.tolist()):
        expected = ref.attention(q[b:b + 1], k_cache[b:b + 1, :n + 2], v_cache[b:b + 1, :n + 2],
                                 causal=True)
        _assert_close(out[b:b + 1], expected)
    assert lse.shape == (2, 4, 2)


def test_padding_helpers_are_differentiable():
    hidden = torch.randn(2, 5, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    rows, indices, cu_seqlens, max_seqlen, used = flashattn.unpad_input(hidden, mask)
    assert cu_seqlens.tolist() == [0, 2, 6] and max_seqlen == 4 and used.tolist() == [2, 4]
    padded = flashattn.pad_input(rows * 2, indices, 2, 5)
    padded.sum().backward()
    assert torch.equal(hidden.grad, 2 * mask[:, :, None].float().expand(2, 5, 3))


def test_errors_carry_the_library_message():
    q, k, v = _inputs(heads_k=3, requires_grad=False)
    with pytest.raises(flashattn.InvalidArgumentError, match="nheads_k dividing nheads=4"):
        flashattn.flash_attn_func(q, k, v)
    q, k, v = _inputs(requires_grad=False)
    with pytest.raises(flashattn.InvalidArgumentError, match="q: expected dtype float32"):
        flashattn.flash_attn_func(q.double(), k.double(), v.double())


class TestOpcheck:
    """torch.library.opcheck: schema, fake tensors, autograd registration, AOT dispatch."""

    def test_forward_dense(self):
        q, k, v = _inputs(seqlen_q=7, seqlen_k=9, dim=8)
        args = (q, k, v, None, None, None, 0, 0, 0.0, 0.35, True, -1, -1, 0.0, None, False)
        torch.library.opcheck(torch.ops.flashattn.forward.default, args)

    def test_forward_varlen(self):
        q, k, v = (torch.randn(10, 2, 8, requires_grad=True) for _ in range(3))
        cu = torch.tensor([0, 4, 10], dtype=torch.int32)
        args = (q, k, v, cu, cu, None, 6, 6, 0.0, 0.35, False, 2, 1, 1.5, None, False)
        torch.library.opcheck(torch.ops.flashattn.forward.default, args)

    def test_backward(self):
        q, k, v = _inputs(seqlen_q=7, seqlen_k=9, dim=8, requires_grad=False)
        out, lse, rng_state = torch.ops.flashattn.forward(
            q, k, v, None, None, None, 0, 0, 0.0, 0.35, False, -1, -1, 0.0, None, False)
        args = (torch.randn_like(out), q, k, v, out, lse, rng_state, None, None, None, 0, 0,
                0.0, 0.35, False, -1, -1, 0.0, None, False)
        torch.library.opcheck(torch.ops.flashattn.backward.default, args)

    def test_forward_kvcache(self):
        q = torch.randn(2, 1, 4, 8)
        k_cache, v_cache = torch.randn(2, 16, 2, 8), torch.randn(2, 16, 2, 8)
        new = torch.randn(2, 1, 2, 8)
        seqlens = torch.tensor([3, 9], dtype=torch.int32)
        args = (q, k_cache, v_cache, new, new.clone(), None, None, seqlens, None, None, None,
                0.35, True, -1, -1, 0.0, True, None, 0)
        torch.library.opcheck(torch.ops.flashattn.forward_kvcache.default, args)


class Block(torch.nn.Module):
    """A module that uses the functions the way models do: projections around attention."""

    def __init__(self, heads=4, dim=8):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = torch.nn.Linear(heads * dim, 3 * heads * dim)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.heads, self.dim)
        out = flashattn.flash_attn_qkvpacked_func(qkv, causal=True)
        flat = qkv.view(b * s, 3, self.heads, self.dim)
        cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32)
        packed = flashattn.flash_attn_varlen_qkvpacked_func(flat, cu, s, causal=True)
        return out.reshape(b, s, -1) + packed.view(b, s, -1)


def test_torch_compile_fullgraph_forward_and_backward():
    torch.manual_seed(10)
    block = Block()
    x = torch.randn(2, 12, 32, requires_grad=True)
    eager = block(x)
    compiled = torch.compile(block, fullgraph=True)
    result = compiled(x)
    torch.testing.assert_close(result, eager)
    grad_eager, = torch.autograd.grad(eager.sum(), x)
    grad_compiled, = torch.autograd.grad(result.sum(), x)
    torch.testing.assert_close(grad_compiled, grad_eager)


def test_torch_compile_kvcache_fullgraph():
    @torch.compile(fullgraph=True)
    def decode(q, k_cache, v_cache, k, v, seqlens):
        return flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v,
                                                 cache_seqlens=seqlens, causal=True)

    k_cache, v_cache = torch.zeros(1, 8, 1, 8), torch.zeros(1, 8, 1, 8)
    q, k, v = torch.randn(1, 1, 2, 8), torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    out = decode(q, k_cache, v_cache, k, v, torch.tensor([3], dtype=torch.int32))
    assert torch.equal(k_cache[0, 3], k[0, 0])
    _assert_close(out, ref.attention(q, k_cache[:, :4], v_cache[:, :4], causal=True))


def _op_call(q, k, v, causal, dropout_p=0.0):
    return torch.ops.flashattn.forward(q, k, v, None, None, None, 0, 0, dropout_p,
                                       q.shape[-1] ** -0.5, causal, -1, 0 if causal else -1,
                                       0.0, None, False)


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_eager_shortcut_matches_the_custom_op(dropout_p):
    """Plain eager calls skip the op's dispatch (_torch_eager.py): same values, same
    gradients, same dropout mask from the same seed."""
    from flashattn import _torch_eager
    torch.manual_seed(9)
    q, k, v = _inputs()
    assert _torch_eager.applies(q, k, v)
    dout = torch.randn(q.shape)
    torch.manual_seed(10)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, dropout_p=dropout_p, causal=True,
                                            return_attn_probs=True)
    torch.manual_seed(10)
    op_out, op_lse, _ = _op_call(q, k, v, True, dropout_p)
    assert torch.equal(out, op_out) and torch.equal(lse, op_lse)
    for got, want in zip(_grads(out, (q, k, v), dout), _grads(op_out, (q, k, v), dout)):
        assert torch.equal(got, want)


def test_eager_shortcut_steps_aside_for_tracing():
    """Fake tensors (and with them torch.compile and export) get the custom op."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from flashattn import _torch_eager
    with FakeTensorMode():
        q, k, v = _inputs(requires_grad=False)
        assert not _torch_eager.applies(q, k, v)
        out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert out.shape == q.shape


@pytest.mark.parametrize("path", ["eager", "custom op"])
def test_backward_fills_no_zero_gradients(path):
    """lse and rng_state have no gradients: autograd must not build zero tensors for them
    on every backward (host time that dominated short calls)."""
    torch.manual_seed(11)
    q, k, v = _inputs()
    dout = torch.randn(q.shape)
    if path == "eager":
        out = flashattn.flash_attn_func(q, k, v, causal=True)
    else:
        out = _op_call(q, k, v, True)[0]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.autograd.grad(out, (q, k, v), dout)
    assert not [e.key for e in prof.key_averages() if e.key in ("aten::zeros", "aten::zero_")]
