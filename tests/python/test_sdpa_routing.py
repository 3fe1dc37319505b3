"""flashattn.torch.activate(): F.scaled_dot_product_attention's flash backend runs
flashattn's kernels, forward and backward, until deactivate(). Results must equal
flash_attn_func's (same kernels, same inputs: bit for bit, but for dq's atomic additions)
and the profiler must see flashattn's kernels, not PyTorch's."""
import contextlib

import pytest

torch = pytest.importorskip("torch")
import torch.nn.attention  # noqa: E402

if not hasattr(torch.nn.attention, "register_flash_attention_impl"):
    pytest.skip("torch has no torch.nn.attention.register_flash_attention_impl",
                allow_module_level=True)

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import flashattn  # noqa: E402
import flashattn.torch as fa_torch  # noqa: E402

needs_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and flashattn.cuda_available()),
    reason="needs a GPU and a flashattn build with CUDA")


@contextlib.contextmanager
def _activated():
    fa_torch.activate()
    try:
        yield
    finally:
        fa_torch.deactivate()


def test_registered_under_its_name():
    assert fa_torch.NAME in torch.nn.attention.list_flash_attention_impls()


def test_activate_and_deactivate():
    assert not fa_torch.is_active()
    with _activated():
        assert fa_torch.is_active()
        assert torch.nn.attention.current_flash_attention_impl() == fa_torch.NAME
    assert not fa_torch.is_active()
    fa_torch.deactivate()  # a second time is a no-op


def _assert_same(routed, expected):
    """out, dk and dv bit for bit; dq up to the order of its atomic float additions."""
    for got, want, name in zip(routed, expected, ("out", "dq", "dk", "dv")):
        assert got.shape == want.shape, name
        if name == "dq":
            error = (got.float() - want.float()).abs().max().item()
            assert error <= 1e-2 * want.abs().max().item(), f"dq: max diff {error}"
        else:
            assert torch.equal(got, want), f"{name}: max diff {(got - want).abs().max().item()}"


def _cuda_kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {event.name for event in prof.events()
            if event.device_type == torch.autograd.DeviceType.CUDA}


def _sdpa_inputs(dtype, batch, heads, heads_k, seqlen_q, seqlen_k, dim):
    make = lambda h, s: torch.randn(batch, h, s, dim, dtype=dtype, device="cuda",
                                    requires_grad=True)
    return make(heads, seqlen_q), make(heads_k, seqlen_k), make(heads_k, seqlen_k)


def _flash_backend_step(q, k, v, dout, causal):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                             enable_gqa=q.shape[1] != k.shape[1])
    return (out, *torch.autograd.grad(out, (q, k, v), dout))


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", [(2, 8, 8, 128, 128, 64), (1, 8, 2, 77, 300, 128),
                                   (3, 4, 4, 200, 200, 72)],
                         ids=["mha", "gqa-noncausal-long-k", "hdim72"])
def test_sdpa_runs_flashattn(dtype, causal, shape):
    batch, heads, heads_k, seqlen_q, seqlen_k, dim = shape
    if causal and seqlen_q != seqlen_k:
        pytest.skip("SDPA's flash backend takes is_causal only for square attention")
    torch.manual_seed(0)
    q, k, v = _sdpa_inputs(dtype, *shape)
    dout = torch.randn(batch, heads, seqlen_q, dim, dtype=dtype, device="cuda")
    ours = flashattn.flash_attn_func(*(x.transpose(1, 2) for x in (q, k, v)), causal=causal)
    expected = (ours.transpose(1, 2),
                *torch.autograd.grad(ours, (q, k, v), dout.transpose(1, 2)))
    with _activated():
        names = _cuda_kernel_names(lambda: _flash_backend_step(q, k, v, dout, causal))
        routed = _flash_backend_step(q, k, v, dout, causal)
    _assert_same(routed, expected)
    assert routed[0].stride() == q.stride()  # as PyTorch's kernel and meta function give it
    assert any("flashattn::" in n and "fwd_kernel" in n for n in names), sorted(names)
    assert any("flashattn::" in n and "bwd_kernel" in n for n in names), sorted(names)
    assert not any("pytorch_flash" in n for n in names), sorted(names)


@needs_cuda
def test_deactivate_gives_back_pytorch_kernels():
    torch.manual_seed(1)
    q, k, v = _sdpa_inputs(torch.bfloat16, 1, 4, 4, 128, 128, 64)
    dout = torch.randn_like(q)
    with _activated():
        pass
    names = _cuda_kernel_names(lambda: _flash_backend_step(q, k, v, dout, True))
    assert not any("flashattn::" in n for n in names), sorted(names)
    assert any("flash" in n for n in names), sorted(names)


@needs_cuda
def test_varlen_attn_runs_flashattn():
    varlen = pytest.importorskip("torch.nn.attention.varlen")
    torch.manual_seed(2)
    lengths = [50, 7, 128]
    cu = torch.tensor([0, 50, 57, 185], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(sum(lengths), 4, 64, dtype=torch.bfloat16, device="cuda",
                           requires_grad=True) for _ in range(3))
    ours = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, 128, 128, causal=True)
    dout = torch.randn_like(ours)
    expected = (ours, *torch.autograd.grad(ours, (q, k, v), dout))
    with _activated():
        out = varlen.varlen_attn(q, k, v, cu, cu, 128, 128, window_size=(-1, 0))  # causal
        routed = (out, *torch.autograd.grad(out, (q, k, v), dout))
    _assert_same(routed, expected)


@needs_cuda
def test_sdpa_under_torch_compile():
    torch.manual_seed(3)
    q, k, v = _sdpa_inputs(torch.float16, 2, 4, 4, 128, 128, 64)
    expected = flashattn.flash_attn_func(*(x.transpose(1, 2) for x in (q, k, v)),
                                         causal=True).transpose(1, 2)
    compiled = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                           is_causal=True))
    with _activated(), torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        assert torch.equal(compiled(q, k, v), expected)


@needs_cuda
def test_dropout_reproduces_with_the_seed():
    """A routed SDPA with dropout runs flashattn's dropout: torch.manual_seed replays the same
    mask (forward and gradients equal), another seed drops other elements."""
    q, k, v = (torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))

    def run(seed):
        torch.manual_seed(seed)
        with _activated(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.2)
            grads = torch.autograd.grad(out.float().square().sum(), (q, k, v))
        return out, grads

    out_a, grads_a = run(0)
    out_b, grads_b = run(0)
    out_c, _ = run(1)
    assert torch.equal(out_a, out_b)
    assert torch.equal(grads_a[1], grads_b[1]) and torch.equal(grads_a[2], grads_b[2])
    assert all(torch.isfinite(g).all() for g in grads_a)
    assert not torch.equal(out_a, out_c)
