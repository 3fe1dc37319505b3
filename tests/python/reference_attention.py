"""A tiny literal attention in float64 numpy (docs/contract.md, one (batch, head) at a time), the
oracle of the Python tests. Layouts as flash_attn: q [b, sq, h, d], k/v [b, sk, hk, d]."""
import numpy as np


def visible_keys(rows, cols, causal=False, window=(-1, -1)):
    """bool [rows, cols], bottom-right aligned: key j is visible to query i iff
    i + cols - rows - left <= j <= i + cols - rows + right."""
    left, right = window
    if causal:
        right = 0
    shifted = np.arange(rows)[:, None] + cols - rows
    j = np.arange(cols)[None, :]
    visible = np.ones((rows, cols), dtype=bool)
    if left >= 0:
        visible &= j >= shifted - left
    if right >= 0:
        visible &= j <= shifted + right
    return visible


def _head_scores(q, k, scale, softcap, slope):
    """Scores of one head, and tanh(raw / softcap) for the softcap gradient."""
    rows, cols = q.shape[0], k.shape[0]
    raw = scale * q @ k.T
    capped = np.tanh(raw / softcap) if softcap > 0 else None
    scores = softcap * capped if softcap > 0 else raw
    if slope is not None:
        distance = np.abs(np.arange(rows)[:, None] + cols - rows - np.arange(cols)[None, :])
        scores = scores - slope * distance
    return scores, capped


def _head_probs(scores, visible):
    masked = np.where(visible, scores, -np.inf)
    top = masked.max(axis=1, keepdims=True)
    empty = ~np.isfinite(top)
    with np.errstate(invalid="ignore"):
        weights = np.where(visible, np.exp(masked - np.where(empty, 0, top)), 0.0)
    total = weights.sum(axis=1, keepdims=True)
    lse = np.where(empty[:, 0], -np.inf, (np.log(np.where(total > 0, total, 1)) + top)[:, 0])
    probs = np.where(total > 0, weights / np.where(total > 0, total, 1), 0.0)
    return probs, lse


def _slope(alibi_slopes, b, h):
    if alibi_slopes is None:
        return None
    slopes = np.asarray(alibi_slopes, dtype=np.float64)
    return slopes[b, h] if slopes.ndim == 2 else slopes[h]


def attention(q, k, v, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
              alibi_slopes=None, keep=None, dropout_p=0.0):
    """(out [b, sq, h, dv], lse [b, h, sq]) in float64. keep: bool [b, h, sq, sk] or None."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, rows, heads, dim = q.shape
    cols, heads_k = k.shape[1], k.shape[2]
    scale = dim ** -0.5 if softmax_scale is None else softmax_scale
    visible = visible_keys(rows, cols, causal, window)
    out = np.zeros((batch, rows, heads, v.shape[-1]))
    lse = np.zeros((batch, heads, rows))
    for b in range(batch):
        for h in range(heads):
            hk = h // (heads // heads_k)
            scores, _ = _head_scores(q[b, :, h], k[b, :, hk], scale, softcap,
                                     _slope(alibi_slopes, b, h))
            probs, lse[b, h] = _head_probs(scores, visible)
            if keep is not None:
                probs = probs * keep[b, h] / (1 - dropout_p)
            out[b, :, h] = probs @ v[b, :, hk]
    return out, lse


def attention_backward(dout, q, k, v, softmax_scale=None, causal=False, window=(-1, -1),
                       softcap=0.0, alibi_slopes=None):
    """(dq, dk, dv) of attention() in float64 (no dropout)."""
    dout, q, k, v = (np.asarray(x, dtype=np.float64) for x in (dout, q, k, v))
    batch, rows, heads, dim = q.shape
    cols, heads_k = k.shape[1], k.shape[2]
    group = heads // heads_k
    scale = dim ** -0.5 if softmax_scale is None else softmax_scale
    visible = visible_keys(rows, cols, causal, window)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in range(batch):
        for h in range(heads):
            hk = h // group
            scores, capped = _head_scores(q[b, :, h], k[b, :, hk], scale, softcap,
                                          _slope(alibi_slopes, b, h))
            probs, _ = _head_probs(scores, visible)
            dv[b, :, hk] += probs.T @ dout[b, :, h]
            dprobs = dout[b, :, h] @ v[b, :, hk].T
            dscores = probs * (dprobs - (dprobs * probs).sum(axis=1, keepdims=True))
            if softcap > 0:
                dscores = dscores * (1 - capped ** 2)
            dq[b, :, h] = scale * dscores @ k[b, :, hk]
            dk[b, :, hk] += scale * dscores.T @ q[b, :, h]
    return dq, dk, dv


def varlen_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes=None, **options):
    """Packed q [total_q, h, d], k/v [total_k, hk, d]: (out [total_q, h, dv], lse [h, total_q])."""
    out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
    lse = np.zeros((q.shape[1], q.shape[0]))
    for b in range(len(cu_seqlens_q) - 1):
        qs = slice(cu_seqlens_q[b], cu_seqlens_q[b + 1])
        ks = slice(cu_seqlens_k[b], cu_seqlens_k[b + 1])
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes[b:b + 1] if np.ndim(alibi_slopes) == 2 else alibi_slopes
        seq_out, seq_lse = attention(q[None, qs], k[None, ks], v[None, ks],
                                     alibi_slopes=slopes, **options)
        out[qs], lse[:, qs] = seq_out[0], seq_lse[0]
    return out, lse


def rotate(x, cos, sin, positions, interleaved):
    """Rotary embedding of x [rows, heads, d] at positions [rows] (float64)."""
    x = np.array(x, dtype=np.float64)
    half = cos.shape[1]
    c = np.asarray(cos, dtype=np.float64)[positions][:, None, :]
    s = np.asarray(sin, dtype=np.float64)[positions][:, None, :]
    first = x[..., 0:2 * half:2] if interleaved else x[..., :half]
    second = x[..., 1:2 * half:2] if interleaved else x[..., half:2 * half]
    rotated_first, rotated_second = first * c - second * s, first * s + second * c
    if interleaved:
        x[..., 0:2 * half:2], x[..., 1:2 * half:2] = rotated_first, rotated_second
    else:
        x[..., :half], x[..., half:2 * half] = rotated_first, rotated_second
    return x
