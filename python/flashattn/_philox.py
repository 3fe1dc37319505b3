"""The library's dropout keep-test in numpy (src/core/philox.hpp, Philox4x32-10), for
materializing the dropout pattern of return_attn_probs. The counter is
(col // 16, row, batch * nheads + head, offset low word) and the key is
(seed low word, seed high word + offset high word); column 16 c + 8 tile + 2 w + e of the
draw takes byte 2 tile + e of word w (the lowest byte first), compared with round(p * 256),
saturated at 255."""
import numpy as np

_MUL = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
_WEYL = (np.uint32(0x9E3779B9), np.uint32(0xBB67AE85))
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)


def _mulhilo(multiplier, word):
    product = multiplier * word.astype(np.uint64)
    return (product >> _SHIFT).astype(np.uint32), (product & _LOW).astype(np.uint32)


def philox4x32_10(counter, key):
    """counter: four uint32 arrays (broadcastable); key: two uint32 scalars."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint32) for c in counter)
    k0, k1 = np.uint32(key[0]), np.uint32(key[1])
    with np.errstate(over="ignore"):
        for _ in range(10):
            hi0, lo0 = _mulhilo(_MUL[0], c0)
            hi1, lo1 = _mulhilo(_MUL[1], c2)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
            k0 = np.uint32(k0 + _WEYL[0])
            k1 = np.uint32(k1 + _WEYL[1])
    return c0, c1, c2, c3


def drop_threshold(p):
    scaled = float(np.float32(p)) * 256.0 + 0.5
    return 0xFF if scaled >= 255.0 else int(scaled)


def keep_mask(seed, offset, bh, rows, cols, dropout_p):
    """bool [rows, cols]: which elements of (batch * nheads + head) `bh` dropout keeps."""
    seed &= 0xFFFFFFFFFFFFFFFF
    offset &= 0xFFFFFFFFFFFFFFFF
    row = np.arange(rows, dtype=np.uint32)[:, None]
    col = np.arange(cols, dtype=np.uint32)[None, :]
    counter = (col >> np.uint32(4), row, np.uint32(bh), np.uint32(offset & 0xFFFFFFFF))
    key = (seed & 0xFFFFFFFF, ((seed >> 32) + (offset >> 32)) & 0xFFFFFFFF)
    words = np.broadcast_arrays(*philox4x32_10(counter, key))
    i = col & np.uint32(15)
    word = np.choose(((i >> np.uint32(1)) & np.uint32(3)).astype(np.intp), words)
    byte = np.uint32(2) * (i >> np.uint32(3)) + (i & np.uint32(1))
    drawn = (word >> (byte * np.uint32(8))) & np.uint32(0xFF)
    return drawn >= np.uint32(drop_threshold(dropout_p))
