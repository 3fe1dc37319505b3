"""flashattn.distributed on the CPU backend: 2 and 4 gloo ranks (processes), each result
against one flashattn call on the whole sequence and the float64 reference.

The rule (docs/design.md, Testing): the distributed result's error against the reference
is at most twice the single-process call's error plus the dtype's tolerance, and it
differs from the single-process result by at most that tolerance. The ranks stay up for
the module (distributed_harness.RankPool); each case has a deadline, so a hang fails."""
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from conftest import TOLERANCE  # noqa: E402
from distributed_harness import RankPool  # noqa: E402

CASES = "distributed_cases"


@pytest.fixture(scope="module", params=[2, 4], ids=["world2", "world4"])
def ranks(request):
    pool = RankPool(request.param)
    yield pool
    pool.close()


def _check(errors, dtype="float32"):
    tolerance = TOLERANCE[dtype]
    for name, value in errors.items():
        if name.endswith("_vs_single"):
            assert value <= tolerance, f"{name}: {value}"
        else:
            distributed, single = value
            assert distributed <= 2 * single + tolerance, f"{name}: {distributed} vs {single}"


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ring_dense(ranks, layout, causal):
    _check(ranks.run(CASES, "dense", seed=1, layout=layout, causal=causal))


@pytest.mark.parametrize("options", [
    dict(window=(5, 0), causal=True),
    dict(window=(3, 7)),
    dict(window=(0, 0)),
    dict(softcap=2.5, causal=True),
    dict(alibi="shared", causal=True),
    dict(alibi="per_batch", window=(6, 2)),
    dict(alibi="shared", softcap=3.0),
    dict(heads=4, heads_k=1, causal=True, softmax_scale=0.3),
], ids=["sliding", "window", "window0", "softcap", "alibi", "alibi_window", "alibi_softcap",
        "mqa_scale"])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_ring_dense_options(ranks, layout, options):
    """Windows and ALiBi must see the whole sequence's positions, not the shard's."""
    _check(ranks.run(CASES, "dense", seed=2, layout=layout, **options))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_ring_low_precision(ranks, dtype):
    _check(ranks.run(CASES, "dense", seed=3, dtype=dtype, layout="zigzag", causal=True,
                     heads_k=4, seqlen=64), dtype)


def test_ring_deterministic_backward(ranks):
    first = ranks.run(CASES, "dense", seed=4, causal=True, deterministic=True)
    second = ranks.run(CASES, "dense", seed=4, causal=True, deterministic=True)
    assert first == second


@pytest.mark.parametrize("options", [
    dict(causal=True),
    dict(causal=False, alibi="per_batch"),
    dict(causal=True, window=(7, 0), softcap=4.0),
], ids=["causal", "alibi", "window_softcap"])
def test_ring_varlen_uneven_shards(ranks, options):
    """Contiguous shards of different lengths per sequence and rank (some empty)."""
    _check(ranks.run(CASES, "varlen", seed=5, seqlens=(40, 9, 1, 24), **options))


def test_ring_varlen_ranks_without_rows(ranks):
    _check(ranks.run(CASES, "varlen", seed=9, seqlens=(12, 5), first_rank_only=True,
                     alibi="per_batch", window=(3, 1)))


def test_ring_varlen_zigzag(ranks):
    world = ranks.world
    _check(ranks.run(CASES, "varlen", seed=6, layout="zigzag", causal=True, alibi="shared",
                     seqlens=(4 * world, 10 * world, 2 * world)))


@pytest.mark.parametrize("options", [
    dict(causal=True, layout="contiguous"),
    dict(causal=True, layout="zigzag", alibi="per_batch"),
    dict(window=(4, 3), softcap=2.0, heads_k=4),
], ids=["causal", "zigzag_alibi", "window_softcap"])
def test_ulysses(ranks, options):
    _check(ranks.run(CASES, "dense", variant="ulysses", seed=7, heads=8,
                     **{"heads_k": ranks.world, **options}))


@pytest.mark.parametrize("options", [
    dict(causal=True, layout="zigzag", alibi="per_batch"),
    dict(layout="contiguous", window=(5, 2), softcap=2.0),
], ids=["zigzag_alibi", "window_softcap"])
def test_hybrid_ring_of_ulysses_groups(ranks, options):
    """2D: Ulysses inside groups of 2 ranks, the ring across the groups (2 ranks: a
    ring of one group, i.e. Ulysses alone; 4 ranks: a 2 x 2 grid)."""
    _check(ranks.run(CASES, "dense", variant="hybrid", ulysses_size=2, seed=10, heads=4,
                     heads_k=2, **options))


@pytest.mark.parametrize("problem", ["dropout", "shape", "layout", "odd_zigzag",
                                     "softcap", "softcap_differs", "ulysses_heads"])
def test_one_rank_rejected_call_fails_every_rank(ranks, problem):
    messages = ranks.run(CASES, "rejects", problem=problem)
    assert all(m is not None for m in messages), messages
    if problem in ("shape", "softcap_differs"):  # valid on each rank, not the same on all
        name = "local_seqlen" if problem == "shape" else "softcap"
        assert all(f"expected the same {name} on every rank" in m for m in messages), messages
        return
    if problem == "ulysses_heads":
        assert all("(Ulysses splits heads across" in m for m in messages), messages
        return
    assert "rank 1 of the process group rejected" in messages[0]
    expected = {"dropout": "dropout_p: expected 0.0", "layout": "layout: expected one of",
                "odd_zigzag": "q: expected an even local sequence length",
                "softcap": "softcap: expected a finite value >= 0"}
    assert expected[problem] in messages[1]


def test_torch_context_parallel_runs_flashattn_kernels(ranks):
    """PyTorch's ring (context_parallel) calling flashattn's SDPA kernels for every step,
    forward and backward; see distributed_cases.torch_context_parallel for what is
    registered and why (CPU SDPA itself never reaches these ops)."""
    pytest.importorskip("torch.distributed.tensor.experimental")
    result = ranks.run(CASES, "torch_context_parallel", seed=8)
    assert result.pop("calls") == ["backward", "forward"]
    for name, error in result.items():
        assert error <= TOLERANCE["float32"], f"{name}: {error}"


def _bench_module(name):
    import importlib
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bench = os.path.join(root, "bench")
    if not os.path.exists(os.path.join(bench, name + ".py")):
        pytest.skip("bench/ is not part of this checkout")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return importlib.import_module(name)


def test_live_tensor_bytes_counts_the_tensors_alive_at_once():
    counter = _bench_module("live_tensor_bytes").LiveTensorBytes()
    with counter:
        a = torch.empty(1000)                   # 4000 bytes
        b = a.to(torch.float64)                 # 8000
        view = b[10:]                           # a view: nothing new
        b.add_(1)                               # in place: nothing new
        del a, b                                # a freed; b's storage lives on in view
        c = torch.zeros(250, dtype=torch.int32)  # 1000
        assert counter.live == 9000
        del view
    assert counter.peak == 12000 and counter.live == 1000
    del c
    assert counter.live == 0


@pytest.mark.parametrize("passes", ["one_pass", "pass_per_kv_head"])
@pytest.mark.parametrize("dtype,heads_k", [("bfloat16", 4), ("bfloat16", 2), ("bfloat16", 1),
                                           ("float32", 4)], ids=["bf16", "bf16_gqa", "bf16_mqa",
                                                                 "fp32"])
def test_ring_holds_each_buffer_once(ranks, dtype, heads_k, passes):
    """The most bytes of tensors the ring holds at once, per element of a rank's q, counted
    on every rank against the buffers the design needs. A pass over a group of heads holds
    the forward's fp32 running output and one result buffer, the backward's fp32 dQ, one
    set of per-call results and two fp32 dK/dV pairs (one sending, one receiving), in both
    the K/V block arriving and, from 3 ranks on, the one received before it, and with
    several passes a copy of its own K/V heads to send. Beside the passes: the output
    (saved for the backward) and, with several passes, dq, dk, dv filled pass by pass.
    Tensors the size of lse ([heads, rows] fp32) are the slack."""
    _bench_module("live_tensor_bytes")
    heads, dim = 4, 32
    size = {"bfloat16": 2, "float32": 4}[dtype]
    kv = heads_k / heads  # K/V elements per q element
    count = heads_k if passes == "pass_per_kv_head" else 1
    blocks = 2 * size * kv * (1 if ranks.world == 2 else 2)
    own_kv = 2 * size * kv if count > 1 else 0
    per_call = size * (1 + 2 * kv)
    forward = (4 + size + blocks + own_kv) / count + (size if count > 1 else 0)
    backward = (4 + per_call + blocks + 2 * 2 * 4 * kv + own_kv) / count + size
    backward += per_call if count > 1 else 0
    slack = 8 * 4 / dim
    counted = ranks.run(CASES, "in_head_passes", case="ring_memory",
                        row_heads_per_pass=1 if count > 1 else 1 << 40, dtype=dtype,
                        heads=heads, heads_k=heads_k, dim=dim)
    assert counted["forward"] <= forward + slack, (counted, forward)
    assert counted["forward_backward"] <= backward + slack, (counted, backward)


@pytest.mark.parametrize("case,options", [
    ("dense", dict(layout="zigzag", causal=True, alibi="per_batch", heads=8, heads_k=4)),
    ("dense", dict(layout="contiguous", window=(5, 2), softcap=2.0, heads=4, heads_k=2,
                   dtype="bfloat16")),
    ("varlen", dict(seqlens=(40, 9, 1, 24), causal=False, alibi="shared", window=(7, 3))),
    ("dense", dict(variant="hybrid", ulysses_size=2, layout="zigzag", causal=True,
                   alibi="per_batch", heads=8, heads_k=4)),
], ids=["zigzag_alibi_gqa", "window_softcap_bf16", "varlen_uneven_alibi", "hybrid"])
def test_ring_in_head_passes(ranks, case, options):
    """The ring run once per KV head (each with its query heads): ALiBi's slopes and lse
    shifts, windows and uneven shards per pass."""
    _check(ranks.run(CASES, "in_head_passes", case=case, row_heads_per_pass=1, seed=12,
                     **options), options.get("dtype", "float32"))


def test_needs_an_initialized_process_group():
    """In this (parent) process no process group exists: a clear error, not a hang."""
    from flashattn.distributed import ring_flash_attn_func
    q = torch.randn(1, 8, 2, 8)
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_flash_attn_func(q, q, q)


def test_context_parallel_benchmark_smoke(tmp_path):
    """bench/context_parallel.py runs end to end on gloo (2 ranks, tiny sizes), so the
    script the two-GPU run needs does not rot between GPU sessions."""
    import json
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(root, "bench", "context_parallel.py")
    if not os.path.exists(script):
        pytest.skip("bench/ is not part of this checkout")
    rows = tmp_path / "rows.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, script, "--smoke", "--nproc", "1,2", "--seqlens", "64",
                           "--variants", "ring-zigzag,ulysses", "--json", str(rows)],
                          timeout=180, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-4000:]}"
    measured = json.loads(rows.read_text())
    assert {(r["world"], r["variant"], r["mode"]) for r in measured} == {
        (1, "single", "fwd"), (1, "single", "fwd+bwd"), (2, "ring-zigzag", "fwd"),
        (2, "ring-zigzag", "fwd+bwd"), (2, "ulysses", "fwd"), (2, "ulysses", "fwd+bwd")}
    assert all(r["tokens_per_s"] > 0 and r["counted_bytes_per_element"] > 0 for r in measured)
