"""Which library calls compute one ring step exactly: the block planner.

In the whole sequence (self-attention, seqlen_q == seqlen_k) row I sees key J iff
-right <= I - J <= left, and ALiBi adds -slope * |I - J| (docs/contract.md). A call on a
query piece and a key piece aligns them bottom-right instead: its diagonal puts the last
query row on the last key. So each (query piece, key piece) pair is first cut down to the
smallest rectangle holding its visible pairs (rows that see nothing and keys nobody sees
are dropped); in that rectangle the window is always expressible as (left, right) >= 0.
ALiBi needs more: the library's bias is -s * |t - e| with t = I - J and e the offset of
the rectangle's bottom-right corner, which equals the true -slope * |t| up to a constant
per row only where t and t - e keep their signs; the band of t is split until they do,
and the constant goes into the lse (and back out for the backward).

Calls are varlen: rectangles of several sequences (or pieces) share one call when their
rows and keys both come in increasing order; the rows and keys between them become empty
sequences of the call (rows with no key: out 0, lse -inf; keys with no row: unused).
"""
from typing import List, NamedTuple, Optional, Tuple

UNBOUNDED = 1 << 62


class Rect(NamedTuple):
    seq: int
    q_start: int       # local rows of the query rank
    q_len: int
    k_start: int       # local rows of the key rank
    k_len: int
    window: Tuple[int, int]  # the library's (left, right) in the rectangle's own frame
    alibi_sign: int    # the library gets slope * alibi_sign
    alibi_shift: int   # true lse = library lse + slope * alibi_shift


class Call(NamedTuple):
    """One varlen library call: its sequences' row and key counts, in order."""
    window: Tuple[int, int]
    seqlens_q: List[int]
    seqlens_k: List[int]
    rects: List[Optional[Rect]]  # per sequence of the call: its Rect, or None for a gap


def band(causal, window_size):
    """(lo, hi): row I sees key J iff lo <= I - J <= hi in the whole sequence."""
    left, right = window_size
    right = 0 if causal else right
    return (-right if right >= 0 else -UNBOUNDED, left if left >= 0 else UNBOUNDED)


def _rectangles(qp, kp, lo, hi, alibi):
    """The Rects of one (query piece, key piece) pair over the band [lo, hi] of t = I - J."""
    qs, qn, ks, kn = qp.global_start, qp.length, kp.global_start, kp.length
    lo = max(lo, qs - (ks + kn - 1))
    hi = min(hi, qs + qn - 1 - ks)
    if lo > hi:
        return []
    # The smallest rectangle holding every visible pair (every t in [lo, hi] occurs).
    row0, row1 = max(qs, ks + lo), min(qs + qn - 1, ks + kn - 1 + hi)
    key0, key1 = max(ks, qs - hi), min(ks + kn - 1, qs + qn - 1 - lo)
    e = row1 - key1  # t on the library's diagonal (its last row on its last key)
    sign, shift = 1, 0
    if alibi and e != 0:
        # -slope * |t| and -s * |t - e| differ by a constant only where neither t nor
        # t - e changes sign: split the band at 0 or e, wherever one falls inside it.
        cut = 0 if lo < 0 < hi else e if lo < e < hi else None
        if cut is not None:
            return (_rectangles(qp, kp, lo, cut - 1, alibi)
                    + _rectangles(qp, kp, cut, hi, alibi))
        t_sign = 1 if lo >= 0 else -1
        d_sign = 1 if lo >= e else -1
        # -slope * t_sign * t == -(slope * t_sign * d_sign) * |t - e| - slope * t_sign * e
        sign, shift = t_sign * d_sign, -t_sign * e
    # The band in the rectangle's frame; a side that cuts nothing off is left unbounded.
    left = -1 if hi >= row1 - key0 else hi - e
    right = -1 if lo <= row0 - key1 else e - lo
    return [Rect(qp.seq, qp.local_start + row0 - qs, row1 - row0 + 1,
                 kp.local_start + key0 - ks, key1 - key0 + 1, (left, right), sign, shift)]


def _coalesce(rects):
    """Fully visible rectangles of one sequence that share their keys and have adjacent
    rows (or share rows, with adjacent keys) become one: fewer, larger calls (zigzag's
    two query chunks against one key chunk, for instance)."""
    merged = True
    while merged:
        merged = False
        for a in range(len(rects)):
            for b in range(len(rects)):
                x, y = rects[a], rects[b]
                if a == b or x.window != (-1, -1) or y.window != (-1, -1) or x.seq != y.seq:
                    continue
                if x.alibi_shift or y.alibi_shift or x.alibi_sign != 1 or y.alibi_sign != 1:
                    continue
                same_keys = (x.k_start, x.k_len) == (y.k_start, y.k_len)
                same_rows = (x.q_start, x.q_len) == (y.q_start, y.q_len)
                if same_keys and x.q_start + x.q_len == y.q_start:
                    union = x._replace(q_len=x.q_len + y.q_len)
                elif same_rows and x.k_start + x.k_len == y.k_start:
                    union = x._replace(k_len=x.k_len + y.k_len)
                else:
                    continue
                rects = [r for i, r in enumerate(rects) if i not in (a, b)] + [union]
                merged = True
                break
            if merged:
                break
    return rects


def _as_call(window, rects, rows_q, rows_k):
    """A varlen call over all rows_q query rows and rows_k keys: each rectangle a sequence,
    with the rows and keys around it as empty sequences (rows alone, or keys alone)."""
    seqlens_q, seqlens_k, per_seq = [], [], []
    q_at = k_at = 0
    for rect in rects:
        if rect.q_start > q_at:
            seqlens_q.append(rect.q_start - q_at), seqlens_k.append(0), per_seq.append(None)
        if rect.k_start > k_at:
            seqlens_q.append(0), seqlens_k.append(rect.k_start - k_at), per_seq.append(None)
        seqlens_q.append(rect.q_len), seqlens_k.append(rect.k_len), per_seq.append(rect)
        q_at, k_at = rect.q_start + rect.q_len, rect.k_start + rect.k_len
    if rows_q > q_at or rows_k > k_at:
        seqlens_q.append(rows_q - q_at), seqlens_k.append(rows_k - k_at), per_seq.append(None)
        if rows_q > q_at and rows_k > k_at:  # rows and keys of a gap must not meet
            seqlens_q[-1], seqlens_k[-1] = rows_q - q_at, 0
            seqlens_q.append(0), seqlens_k.append(rows_k - k_at), per_seq.append(None)
    return Call(window, seqlens_q, seqlens_k, per_seq)


def plan_step(query_pieces, key_pieces, rows_q, rows_k, causal, window_size, alibi):
    """The calls that attend the query rank's rows to the key rank's keys (rows_q and
    rows_k: their packed row counts); [] when no row sees any of these keys."""
    lo, hi = band(causal, window_size)
    rects = []
    for qp in query_pieces:
        for kp in key_pieces:
            if qp.seq == kp.seq:
                rects += _rectangles(qp, kp, lo, hi, alibi)
    rects = sorted(_coalesce(rects), key=lambda r: (r.q_start, r.k_start))
    groups = []  # (window, [rects]): rows and keys both increasing within a group
    for rect in rects:
        for window, members in groups:
            last = members[-1]
            if (window == rect.window and last.q_start + last.q_len <= rect.q_start
                    and last.k_start + last.k_len <= rect.k_start):
                members.append(rect)
                break
        else:
            groups.append((rect.window, [rect]))
    return [_as_call(window, members, rows_q, rows_k) for window, members in groups]
