"""The flash_attn functions on CUDA tensors: the library's kernels on torch's current
stream with torch-allocated outputs and workspace. Skips without a GPU; a feature whose
kernel is not there yet (the library raises UnsupportedError) is an expected failure."""
import contextlib

import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
import reference_torch as ref  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and flashattn.cuda_available()),
    reason="needs a GPU and a flashattn build with CUDA")

TOLERANCE = {torch.float16: 4e-3, torch.bfloat16: 3e-2}


@contextlib.contextmanager
def _pending_kernels():
    """A call the CUDA backend does not implement yet is an xfail, with its reason."""
    try:
        yield
    except flashattn.UnsupportedError as error:
        pytest.xfail(str(error))


def _inputs(dtype, batch=2, seqlen_q=77, seqlen_k=131, heads=4, heads_k=2, dim=64,
            requires_grad=False):
    make = lambda *shape: torch.randn(*shape, dtype=dtype, device="cuda",
                                      requires_grad=requires_grad)
    return (make(batch, seqlen_q, heads, dim), make(batch, seqlen_k, heads_k, dim),
            make(batch, seqlen_k, heads_k, dim))


def _assert_close(actual, expected, dtype, scale=1.0):
    error = (actual.double() - expected.double()).abs().max().item()
    assert error <= TOLERANCE[dtype] * scale, f"max abs error {error}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dim", [64, 128, 5, 72])
@pytest.mark.parametrize("causal", [False, True])
def test_forward(dtype, dim, causal):
    torch.manual_seed(0)
    q, k, v = _inputs(dtype, dim=dim)
    with _pending_kernels():
        out, lse, _ = flashattn.flash_attn_func(q, k, v, causal=causal, return_attn_probs=True)
    assert out.device == q.device and lse.dtype == torch.float32
    _assert_close(out, ref.attention(q, k, v, causal=causal), dtype)


def test_forward_on_a_side_stream():
    torch.manual_seed(1)
    q, k, v = _inputs(torch.float16)
    expected = ref.attention(q, k, v)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), _pending_kernels():
        out = flashattn.flash_attn_func(q, k, v)
    torch.cuda.current_stream().wait_stream(stream)
    _assert_close(out, expected, torch.float16)


def test_varlen_forward():
    torch.manual_seed(2)
    lens_q, lens_k = [30, 1, 64], [50, 7, 64]
    cu = lambda lens: torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()],
                                   dtype=torch.int32, device="cuda")
    cu_q, cu_k = cu(lens_q), cu(lens_k)
    q = torch.randn(sum(lens_q), 4, 64, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(sum(lens_k), 1, 64, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(sum(lens_k), 1, 64, dtype=torch.bfloat16, device="cuda")
    with _pending_kernels():
        out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 64, 64, causal=True)
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        expected = ref.attention(q[None, qs], k[None, ks], v[None, ks], causal=True)[0]
        _assert_close(out[qs], expected, torch.bfloat16)


def test_cuda_graph_capture_and_replay():
    torch.manual_seed(3)
    q, k, v = _inputs(torch.float16)
    with _pending_kernels():
        flashattn.flash_attn_func(q, k, v, causal=True)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flashattn.flash_attn_func(q, k, v, causal=True)
    for _ in range(2):
        for x in (q, k, v):
            x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, flashattn.flash_attn_func(q, k, v, causal=True))


def test_cuda_graph_with_dropout_replays_fresh_masks():
    """A captured training step with dropout (forward + backward): each replay drops fresh
    elements, and the ones an eager step drops from the same generator state."""
    torch.manual_seed(5)
    q, k, v = _inputs(torch.bfloat16, requires_grad=True)
    dout = torch.randn_like(q)

    def step():
        out = flashattn.flash_attn_func(q, k, v, dropout_p=0.3, causal=True)
        return (out,) + torch.autograd.grad(out, (q, k, v), dout)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture, on a side stream as torch.cuda.graphs asks
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    replays = []
    for seed in (11, 12, 11):
        torch.cuda.manual_seed(seed)
        graph.replay()
        torch.cuda.synchronize()
        replays.append(tuple(t.clone() for t in captured))
        torch.cuda.manual_seed(seed)
        eager = step()
        for got, want in zip(replays[-1], eager):
            assert torch.equal(got, want), "a replay drops what eager drops from one state"
    assert not torch.equal(replays[0][0], replays[1][0]), "another state, another mask"
    assert all(torch.equal(a, b) for a, b in zip(replays[0], replays[2]))


def test_dropout_state_stays_on_the_device():
    torch.manual_seed(6)
    q, k, v = _inputs(torch.float16)
    out, lse, rng_state = torch.ops.flashattn.forward(q, k, v, None, None, None, 0, 0, 0.2,
                                                      0.125, False, -1, -1, 0.0, None, False)
    assert rng_state.device == q.device and rng_state.dtype == torch.int64
    assert rng_state.shape == (2,)


def test_torch_compile_fullgraph():
    torch.manual_seed(4)
    q, k, v = _inputs(torch.bfloat16)
    compiled = torch.compile(lambda q, k, v: flashattn.flash_attn_func(q, k, v, causal=True),
                             fullgraph=True)
    with _pending_kernels():
        expected = flashattn.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(compiled(q, k, v), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_backward(dtype):
    torch.manual_seed(5)
    q, k, v = _inputs(dtype, requires_grad=True)
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    expected = ref.attention(q, k, v, causal=True)
    dout = torch.randn_like(out)
    with _pending_kernels():
        grads = torch.autograd.grad(out, (q, k, v), dout)
    for grad, want in zip(grads, torch.autograd.grad(expected, (q, k, v), dout)):
        _assert_close(grad, want, dtype, scale=5)


def test_dropout_seed_comes_from_the_cuda_generator():
    q, k, v = _inputs(torch.float16)
    torch.cuda.manual_seed(6)
    first = flashattn.flash_attn_func(q, k, v, dropout_p=0.2)
    torch.cuda.manual_seed(6)
    assert torch.equal(first, flashattn.flash_attn_func(q, k, v, dropout_p=0.2))
    assert not torch.equal(first, flashattn.flash_attn_func(q, k, v, dropout_p=0.2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dropout_forward_and_backward_use_the_mask_torch_manual_seed_picks(dtype):
    q, k, v = _inputs(dtype, requires_grad=True)
    torch.manual_seed(9)
    out, _, probs = flashattn.flash_attn_func(q, k, v, dropout_p=0.25, causal=True,
                                              return_attn_probs=True)
    torch.manual_seed(9)
    assert torch.equal(out, flashattn.flash_attn_func(q, k, v, dropout_p=0.25, causal=True))
    keep = ~torch.signbit(probs[:, :, :q.shape[1], :k.shape[1]])
    expected = ref.attention(q, k, v, causal=True, keep=keep, dropout_p=0.25)
    _assert_close(out, expected, dtype)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    for grad, want in zip(grads, torch.autograd.grad(expected, (q, k, v), dout)):
        _assert_close(grad, want, dtype, scale=5)


def test_kvcache():
    torch.manual_seed(7)
    k_cache = torch.randn(2, 256, 2, 64, dtype=torch.float16, device="cuda")
    v_cache = torch.randn_like(k_cache)
    q = torch.randn(2, 1, 4, 64, dtype=torch.float16, device="cuda")
    k, v = torch.randn(2, 1, 2, 64, dtype=torch.float16, device="cuda"), torch.randn(
        2, 1, 2, 64, dtype=torch.float16, device="cuda")
    seqlens = torch.tensor([10, 200], dtype=torch.int32, device="cuda")
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=seqlens,
                                            causal=True)
    for b, n in enumerate(seqlens.tolist()):
        assert torch.equal(k_cache[b, n], k[b, 0])
        expected = ref.attention(q[b:b + 1], k_cache[b:b + 1, :n + 1],
                                 v_cache[b:b + 1, :n + 1], causal=True)
        _assert_close(out[b:b + 1], expected, torch.float16)
