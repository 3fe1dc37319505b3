"""The optional torch extension (python/torch_ext, flashattn/_torch_ext.py): eager calls on
torch tensors run a C++ torch::autograd::Function when the extension was built against the
running torch, with the Python path's results bit for bit, its errors, and the Python path
as the fallback (FLASHATTN_TORCH_EXT=0, another torch, inputs it does not take). Skips when
the extension was not built (a build without torch, or FLASHATTN_TORCH_EXT=OFF)."""
import importlib

import pytest

torch = pytest.importorskip("torch")

import flashattn  # noqa: E402
from flashattn import _torch_eager, _torch_ext  # noqa: E402

try:
    _build = importlib.import_module("flashattn._torch_ext_build")
except ImportError:
    _build = None

pytestmark = pytest.mark.skipif(_build is None, reason="the torch extension was not built")

_cuda = torch.cuda.is_available() and flashattn.cuda_available()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not _cuda, reason="needs a GPU and a flashattn build with CUDA"))]


def _uses_extension(out):
    return out.grad_fn is not None and "AttentionFunction" in out.grad_fn.name()


@pytest.fixture
def python_path(monkeypatch):
    """Runs the enclosed calls on the Python path (as when the extension is unavailable)."""
    def use(enabled):
        monkeypatch.setattr(_torch_ext, "_op", _torch_ext._NOT_LOADED if enabled else None)
    return use


def _run(q, k, v, dout, seed=0, **kwargs):
    """(out, lse, dq, dk, dv) of flash_attn_func, its gradients for the cotangent dout."""
    torch.manual_seed(seed)
    out, lse, _ = flashattn.flash_attn_func(q, k, v, return_attn_probs=True, **kwargs)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return (out, lse, *grads), _uses_extension(out)


def _inputs(device, dtype, b=2, sq=33, sk=45, h=4, hk=2, d=40, strided=False):
    gen = torch.Generator().manual_seed(b * 1000 + sq * 10 + hk)
    make = lambda *shape: torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)  # noqa
    if strided:
        # q a slice of a wider tensor, k and v views of one packed kv tensor: no copies made.
        q = make(b, sq, h + 2, d)[:, :, 1:h + 1]
        kv = make(b, sk, 2, hk, d)
        k, v = kv[:, :, 0], kv[:, :, 1]
    else:
        q, k, v = make(b, sq, h, d), make(b, sk, hk, d), make(b, sk, hk, d)
    # Strided: a cotangent whose last dimension is not contiguous (the backward copies it).
    dout = make(b, sq, d, h).transpose(2, 3) if strided else make(b, sq, h, d)
    return [x.requires_grad_() for x in (q, k, v)], dout


CASES = {
    "causal": dict(causal=True),
    "plain": dict(),
    "window": dict(window_size=(7, 3)),
    "causal window softcap": dict(causal=True, window_size=(9, -1), softcap=3.0),
    "alibi scale": dict(alibi_slopes="alibi", softmax_scale=0.3),
    "deterministic": dict(causal=True, deterministic=True),
    "dropout": dict(dropout_p=0.2, causal=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("case", list(CASES))
def test_bitwise_equal_to_python_path(device, dtype, strided, case, python_path):
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("the CUDA kernels take fp16 and bf16")
    (q, k, v), dout = _inputs(device, dtype, strided=strided)
    kwargs = dict(CASES[case])
    if kwargs.get("alibi_slopes") == "alibi":
        kwargs["alibi_slopes"] = torch.rand(q.shape[2], device=device) * 0.5
    if device == "cuda":
        kwargs["deterministic"] = True  # the CUDA backward's dq otherwise sums in atomic order
    python_path(True)
    ours, used = _run(q, k, v, dout, **kwargs)
    assert used
    python_path(False)
    theirs, used = _run(q, k, v, dout, **kwargs)
    assert not used
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype, name
        assert torch.equal(a, b), name


@pytest.mark.parametrize("device", DEVICES)
def test_packed_and_varlen_functions(device, python_path):
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(5)
    qkv = torch.randn(2, 19, 3, 4, 32, generator=gen).to(device, dtype).requires_grad_()
    lens = [7, 12, 20]
    cu = torch.tensor([0, 7, 19, 39], dtype=torch.int32, device=device)
    packed = torch.randn(39, 3, 4, 32, generator=gen).to(device, dtype).requires_grad_()
    results = []
    for enabled in (True, False):
        python_path(enabled)
        out = flashattn.flash_attn_qkvpacked_func(qkv, causal=True, deterministic=True)
        assert _uses_extension(out) == enabled
        vout = flashattn.flash_attn_varlen_qkvpacked_func(packed, cu, max(lens), causal=True,
                                                          deterministic=True)
        assert _uses_extension(vout) == enabled
        loss = out.float().square().sum() + vout.float().square().sum()
        results.append((out, vout, *torch.autograd.grad(loss, (qkv, packed))))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_lse", [False, True])
def test_inference_calls(device, with_lse, python_path):
    """No gradient needed: the extension's op without an autograd node, lse only when
    asked for."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    (q, k, v), _ = _inputs(device, dtype)
    q, k, v = (x.detach() for x in (q, k, v))
    results = []
    for enabled in (True, False):
        python_path(enabled)
        calls = []
        original = _torch_ext._op if enabled else None
        if enabled:
            _torch_ext._load()
            original = _torch_ext._op
            _torch_ext._op = lambda *a: calls.append(1) or original(*a)
        result = flashattn.flash_attn_func(q, k, v, causal=True, return_attn_probs=with_lse)
        assert bool(calls) == enabled
        results.append(result if with_lse else (result,))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_two_calls_in_one_graph(python_path):
    (q, k, v), dout = _inputs("cpu", torch.float32, sq=45, h=2, hk=2)
    grads = []
    for enabled in (True, False):
        python_path(enabled)
        first = flashattn.flash_attn_func(q, k, v, causal=True)
        second = flashattn.flash_attn_func(first, k, v, window_size=(5, 5))
        assert _uses_extension(first) == _uses_extension(second) == enabled
        grads.append(torch.autograd.grad((first * second).sum(), (q, k, v)))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_errors_are_the_python_paths(python_path):
    """A call the library rejects raises the library's exception and message; inputs the
    extension does not take (a dtype, a rank) reach the Python path, which reports them."""
    cases = [
        (dict(shape_k=(1, 8, 3, 16)), flashattn.InvalidArgumentError),
        (dict(dropout_p=1.0), flashattn.InvalidArgumentError),
        (dict(window_size=(2**31, 0)), flashattn.InvalidArgumentError),
        (dict(dtype=torch.float64), flashattn.InvalidArgumentError),
        (dict(shape_k=(8, 2, 16)), flashattn.InvalidArgumentError),
        (dict(alibi_slopes=torch.ones(3)), flashattn.InvalidArgumentError),
    ]
    for call, error in cases:
        call = dict(call)
        shape_k = call.pop("shape_k", (1, 8, 2, 16))
        dtype = call.pop("dtype", torch.float32)
        messages = []
        for enabled in (True, False):
            python_path(enabled)
            q = torch.randn(1, 8, 4, 16, dtype=dtype, requires_grad=True)
            k = torch.randn(*shape_k, dtype=dtype, requires_grad=True)
            v = torch.randn(*shape_k, dtype=dtype, requires_grad=True)
            with pytest.raises(error) as raised:
                flashattn.flash_attn_func(q, k, v, **call)
            messages.append((type(raised.value), str(raised.value)))
        assert messages[0] == messages[1], call


def test_double_backward_raises_as_the_python_path(python_path):
    (q, k, v), _ = _inputs("cpu", torch.float32)
    messages = []
    for enabled in (True, False):
        python_path(enabled)
        out = flashattn.flash_attn_func(q, k, v, causal=True)
        assert _uses_extension(out) == enabled
        dq, _, _ = torch.autograd.grad(out.sum(), (q, k, v), create_graph=True)
        assert not dq.requires_grad  # the backward is not differentiable
        with pytest.raises(RuntimeError) as raised:
            torch.autograd.grad(dq.sum(), q)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]


def test_a_plain_call_uses_the_extension():
    """Fails when the extension was built for this torch but is not used (so it cannot rot
    unnoticed): loading, the op's schema and the routing all work."""
    if not _torch_ext.built_for(_build.TORCH_VERSION, _build.TORCH_CUDA):
        pytest.skip(f"built for torch {_build.TORCH_VERSION}, running {torch.__version__}")
    q, k, v = (torch.randn(1, 16, 2, 32, requires_grad=True) for _ in range(3))
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert _torch_ext.status() == "loaded"
    assert _uses_extension(out), out.grad_fn


def test_environment_variable_disables_it(monkeypatch):
    monkeypatch.setattr(_torch_ext, "_op", _torch_ext._NOT_LOADED)
    monkeypatch.setenv("FLASHATTN_TORCH_EXT", "0")
    q, k, v = (torch.randn(1, 16, 2, 32, requires_grad=True) for _ in range(3))
    out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert not _uses_extension(out)
    assert type(out.grad_fn).__name__ == "_AttentionBackward"
    assert _torch_ext.status() == "disabled by FLASHATTN_TORCH_EXT"


class _Torch:
    def __init__(self, version, cuda):
        self.__version__ = version
        self.version = type("version", (), {"cuda": cuda})


def test_version_check(monkeypatch):
    assert _torch_ext.built_for(torch.__version__, torch.version.cuda or "")
    assert _torch_ext.built_for("2.11.0+cu130", "13.0", _Torch("2.11.0+cu130", "13.0"))
    assert not _torch_ext.built_for("2.11.0+cu130", "13.0", _Torch("2.11.1+cu130", "13.0"))
    assert not _torch_ext.built_for("2.11.0", "13.0", _Torch("2.11.0", None))  # CUDA-ness
    assert not _torch_ext.built_for("2.11.0", "", _Torch("2.11.0", "12.8"))
    # Built for another torch: not loaded, and the Python path runs.
    monkeypatch.setattr(_build, "TORCH_VERSION", "1.0.0")
    monkeypatch.setattr(_torch_ext, "_op", _torch_ext._NOT_LOADED)
    monkeypatch.delenv("FLASHATTN_TORCH_EXT", raising=False)
    q, k, v = (torch.randn(1, 16, 2, 32, requires_grad=True) for _ in range(3))
    assert not _uses_extension(flashattn.flash_attn_func(q, k, v))
    assert _torch_ext.status().startswith("built for torch 1.0.0")


def test_not_used_for_tracing(monkeypatch):
    """Fake tensors (torch.compile, export) keep the custom ops."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def refuse(*args, **kwargs):
        raise AssertionError("the extension was called while tracing")
    monkeypatch.setattr(_torch_ext, "attention", refuse)
    with FakeTensorMode():
        q, k, v = (torch.randn(1, 16, 2, 32, requires_grad=True) for _ in range(3))
        assert not _torch_eager.applies(q, k, v)
        out = flashattn.flash_attn_func(q, k, v, causal=True)
    assert out.shape == q.shape


def test_compiled_autograd(python_path):
    """torch._dynamo's compiled autograd over an eager forward takes the C++ node (whose
    saved values are plain tensors and numbers), with the Python path's gradients."""
    compiled_autograd = pytest.importorskip("torch._dynamo.compiled_autograd")
    enable = getattr(compiled_autograd, "_enable", None) or getattr(compiled_autograd, "enable")
    (q, k, v), dout = _inputs("cpu", torch.float32)
    grads = []
    for enabled in (True, False):
        python_path(enabled)
        for x in (q, k, v):
            x.grad = None
        out = flashattn.flash_attn_func(q, k, v, causal=True, softcap=2.0)
        assert _uses_extension(out) == enabled
        with enable(torch.compile(backend="eager")):
            out.backward(dout)
        grads.append([x.grad for x in (q, k, v)])
    for a, b in zip(*grads):
        assert torch.equal(a, b)
