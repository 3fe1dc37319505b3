"""flash_attn.bert_padding's helpers (flashattn.bert_padding) on numpy arrays (and torch
tensors where torch is installed)."""
import numpy as np
import pytest

import flashattn
import flashattn.bert_padding
from conftest import randn


def test_unpad_pad_round_trip(rng):
    hidden = randn(rng, (3, 6, 2, 4))
    mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0]])
    rows, indices, cu_seqlens, max_seqlen, used = flashattn.unpad_input(hidden, mask)
    assert rows.shape == (11, 2, 4)
    assert cu_seqlens.dtype == np.int32 and cu_seqlens.tolist() == [0, 3, 9, 11]
    assert max_seqlen == 6 and isinstance(max_seqlen, int) and used.tolist() == [3, 6, 2]
    padded = flashattn.pad_input(rows, indices, 3, 6)
    np.testing.assert_array_equal(padded, hidden * mask[:, :, None, None])


def test_unused_mask_counts_rows_but_not_use(rng):
    hidden = randn(rng, (2, 4, 3))
    mask = np.array([[1, 1, 0, 0], [1, 0, 0, 0]])
    unused = np.array([[0, 0, 1, 0], [0, 1, 1, 0]])
    rows, _, cu_seqlens, max_seqlen, used = flashattn.unpad_input(hidden, mask, unused)
    assert cu_seqlens.tolist() == [0, 3, 6] and used.tolist() == [2, 1] and max_seqlen == 3


def test_index_first_axis_and_its_inverse(rng):
    rows = randn(rng, (7, 3))
    indices = np.array([5, 0, 2])
    np.testing.assert_array_equal(flashattn.bert_padding.index_first_axis(rows, indices),
                                  rows[[5, 0, 2]])
    scattered = flashattn.bert_padding.index_put_first_axis(rows[:3], indices, 6)
    expected = np.zeros((6, 3), dtype=rows.dtype)
    expected[[5, 0, 2]] = rows[:3]
    np.testing.assert_array_equal(scattered, expected)


def test_unpad_concatenated_sequences(rng):
    hidden = randn(rng, (3, 6, 2))
    lengths = np.array([[2, 3, 0, 0, 0, 0], [3, 2, 0, 0, 0, 0], [6, 0, 0, 0, 0, 0]])
    rows, indices, cu_seqlens, longest = (
        flashattn.bert_padding.unpad_input_for_concatenated_sequences(hidden, lengths))
    # Row 0 holds 5 tokens (2 + 3), row 1 holds 5, row 2 holds 6.
    assert indices.tolist() == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17]
    assert cu_seqlens.dtype == np.int32 and cu_seqlens.tolist() == [0, 2, 5, 8, 10, 16]
    assert longest == 6
    np.testing.assert_array_equal(rows, hidden.reshape(18, 2)[indices])


def test_torch_matches_numpy(rng):
    torch = pytest.importorskip("torch")
    hidden = randn(rng, (3, 6, 2))
    lengths = np.array([[2, 3, 0, 0, 0, 0], [3, 2, 0, 0, 0, 0], [6, 0, 0, 0, 0, 0]])
    expected = flashattn.bert_padding.unpad_input_for_concatenated_sequences(hidden, lengths)
    got = flashattn.bert_padding.unpad_input_for_concatenated_sequences(
        torch.from_numpy(hidden), torch.from_numpy(lengths))
    for a, b in zip(got[:3], expected[:3]):
        np.testing.assert_array_equal(a.numpy(), b)
    assert got[3] == expected[3]
    indices = torch.tensor([4, 1])
    scattered = flashattn.bert_padding.index_put_first_axis(torch.ones(2, 3), indices, 5)
    assert scattered.sum().item() == 6 and scattered[[4, 1]].eq(1).all()
