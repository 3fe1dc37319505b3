"""unpad_input / pad_input (flash_attn.bert_padding) on numpy arrays."""
import numpy as np

import flashattn
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
