"""The attention probabilities of return_attn_probs, materialized in numpy (testing only,
as in FlashAttention-2): softmax(scores) per docs/contract.md, with the elements dropout removed
negated, in [batch, nheads, seqlen_q rounded up to 128, seqlen_k rounded up to 128]."""
import numpy as np

from ._philox import keep_mask


def _round128(n):
    return (n + 127) // 128 * 128


def _visible(rows, cols, window, causal):
    """bool [rows, cols]: docs/contract.md step 4, bottom-right aligned."""
    left, right = window
    if causal:
        right = 0
    i = np.arange(rows)[:, None] + cols - rows
    j = np.arange(cols)[None, :]
    visible = np.ones((rows, cols), dtype=bool)
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    return visible


def _sequences(q, k, lse, varlen):
    """(q_b, k_b, lse_b) per sequence: [sq, h, d], [sk, hk, d], [h, sq]."""
    if varlen is None:
        for b in range(q.shape[0]):
            yield q[b], k[b], lse[b]
        return
    cu_q, cu_k = varlen
    for b in range(len(cu_q) - 1):
        yield (q[cu_q[b]:cu_q[b + 1]], k[cu_k[b]:cu_k[b + 1]],
               lse[:, cu_q[b]:cu_q[b + 1]])


def attention_probs(q, k, lse, scale, causal, window, softcap, alibi_slopes, dropout_p, seed,
                    offset, varlen=None, max_seqlens=None):
    """q, k, lse: float32 numpy arrays as passed to the library; varlen: (cu_q, cu_k)."""
    sequences = list(_sequences(q, k, lse, varlen))
    nheads = q.shape[-2]
    group = nheads // k.shape[-2]
    if max_seqlens is None:
        max_seqlens = (q.shape[1], k.shape[1])
    probs = np.zeros((len(sequences), nheads, _round128(max_seqlens[0]),
                      _round128(max_seqlens[1])), dtype=np.float32)
    for b, (q_b, k_b, lse_b) in enumerate(sequences):
        rows, cols = q_b.shape[0], k_b.shape[0]
        keys = np.repeat(k_b, group, axis=1)
        scores = scale * np.einsum("ihd,jhd->hij", q_b, keys)
        if softcap > 0:
            scores = softcap * np.tanh(scores / softcap)
        if alibi_slopes is not None:
            slopes = alibi_slopes[b] if alibi_slopes.ndim == 2 else alibi_slopes
            distance = np.abs(np.arange(rows)[:, None] + cols - rows - np.arange(cols)[None, :])
            scores = scores - slopes[:, None, None] * distance
        visible = _visible(rows, cols, window, causal)
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.where(visible & np.isfinite(lse_b)[:, :, None],
                         np.exp(scores - lse_b[:, :, None]), 0.0)
        if dropout_p > 0:
            for h in range(nheads):
                keep = keep_mask(seed, offset, b * nheads + h, rows, cols, dropout_p)
                p[h] = np.where(keep, p[h], -p[h])
        probs[b, :, :rows, :cols] = p
    return probs
