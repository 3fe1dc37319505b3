"""The ring's block planner (flashattn/distributed/_blocks.py) against brute force: for
every (query shard, key shard) of many layouts, the planned calls must cover each pair
the whole sequence's mask shows exactly once, and nothing else, with the library's
bottom-right window and ALiBi bias (plus the lse shift) equal to the whole sequence's.
Pure integer and numpy work: no process group, no attention call."""
import itertools

import numpy as np
import pytest

pytest.importorskip("torch")  # flashattn.distributed is torch-only
from flashattn.distributed import _blocks, _layout  # noqa: E402
from reference_attention import visible_keys  # noqa: E402


def _global_positions(pieces, rows):
    """(sequence, position) of each packed row."""
    where = [None] * rows
    for p in pieces:
        for i in range(p.length):
            where[p.local_start + i] = (p.seq, p.global_start + i)
    return where


def _check_step(query_pieces, key_pieces, rows_q, rows_k, causal, window, alibi):
    lo, hi = _blocks.band(causal, window)
    qpos, kpos = _global_positions(query_pieces, rows_q), _global_positions(key_pieces, rows_k)
    expected = np.zeros((rows_q, rows_k), dtype=bool)
    for i, j in itertools.product(range(rows_q), range(rows_k)):
        if qpos[i] and kpos[j] and qpos[i][0] == kpos[j][0]:
            expected[i, j] = lo <= qpos[i][1] - kpos[j][1] <= hi
    covered = np.zeros((rows_q, rows_k), dtype=int)
    for call in _blocks.plan_step(query_pieces, key_pieces, rows_q, rows_k, causal, window,
                                  alibi):
        assert sum(call.seqlens_q) == rows_q and sum(call.seqlens_k) == rows_k
        q_at = k_at = 0
        for rect, n_q, n_k in zip(call.rects, call.seqlens_q, call.seqlens_k):
            if rect is None:
                assert n_q == 0 or n_k == 0, "a gap's rows would see its keys"
            else:
                where = (rect.q_start, rect.k_start, rect.q_len, rect.k_len)
                assert where == (q_at, k_at, n_q, n_k)
                seen = visible_keys(n_q, n_k, False, call.window)
                covered[q_at:q_at + n_q, k_at:k_at + n_k] += seen
                for i, j in zip(*np.nonzero(seen)):
                    t = qpos[q_at + i][1] - kpos[k_at + j][1]
                    library = -rect.alibi_sign * abs(i + n_k - n_q - j)
                    assert library + rect.alibi_shift == -abs(t), "ALiBi bias differs"
            q_at, k_at = q_at + n_q, k_at + n_k
    assert np.array_equal(covered, expected.astype(int))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_planned_calls_see_exactly_the_whole_sequence_mask(world, layout):
    rng = np.random.default_rng(world * 10 + len(layout))
    for _ in range(12):
        if layout == "zigzag":
            lengths = [[2 * int(rng.integers(1, 5))] * 1 for _ in range(world)]
            lengths = [lengths[0]] * world
        else:
            lengths = [[int(rng.integers(0, 9)), int(rng.integers(0, 9))] for _ in range(world)]
        pieces = [_layout.pieces_of_rank(lengths, r, layout) for r in range(world)]
        rows = [sum(x) for x in lengths]
        causal = bool(rng.integers(0, 2))
        window = tuple(int(x) for x in rng.integers(-1, 6, size=2))
        for me, source in itertools.product(range(world), repeat=2):
            _check_step(pieces[me], pieces[source], rows[me], rows[source], causal, window,
                        alibi=True)
