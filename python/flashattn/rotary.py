"""Rotary position embeddings (RoPE) with flash_attn.layers.rotary's functions and their
arguments, on torch tensors (differentiable) and numpy arrays alike.

A row at position p has its first rotary_dim columns turned by the angles of row p of
cos/sin [seqlen_ro, rotary_dim / 2]; the other columns pass through. Pairs are (i, i +
rotary_dim / 2) (GPT-NeoX, interleaved=False) or (2i, 2i + 1) (GPT-J, interleaved=True):

    out[a] = x[a] * cos[p, i] - x[b] * sin[p, i]
    out[b] = x[b] * cos[p, i] + x[a] * sin[p, i]

Rows are at position t + seqlen_offsets[b] (t counted from the start of their sequence, an
int offset applying to every sequence); a position past the last row of cos/sin is left
unrotated, as flash-attn's kernel does. The arithmetic is fp32 (fp64 for fp64 inputs) with
one rounding to the input dtype. RotaryEmbedding (a torch module) is imported from here on
first use, so this module itself needs no torch.
"""
import sys

import numpy as np

from ._errors import invalid_argument

__all__ = ["apply_rotary_emb", "apply_rotary_emb_func", "apply_rotary_emb_qkv_",
           "apply_rotary_emb_kv_", "RotaryEmbedding"]


def _torch_of(x):
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else None


class _Numpy:
    """The few array operations the rotation needs, for numpy arrays."""

    @staticmethod
    def arange(n, like):
        return np.arange(n)

    @staticmethod
    def as_index(values, like):
        return np.asarray(values).astype(np.int64)

    @staticmethod
    def compute_dtype(x):
        return np.float64 if x.dtype == np.float64 else np.float32

    @staticmethod
    def cast(x, dtype):
        return np.asarray(x).astype(dtype)

    @staticmethod
    def where(cond, a, b):
        return np.where(cond, a, b)

    cat = staticmethod(lambda parts: np.concatenate(parts, axis=-1))
    stack = staticmethod(lambda parts: np.stack(parts, axis=-1))

    @staticmethod
    def repeat_rows(values, counts):
        return np.repeat(values, counts)

    @staticmethod
    def write(target, values):
        target[...] = values


class _Torch:
    """The same operations for torch tensors (differentiable)."""

    def __init__(self, torch):
        self.torch = torch

    def arange(self, n, like):
        return self.torch.arange(n, device=like.device)

    def as_index(self, values, like):
        if isinstance(values, self.torch.Tensor):
            return values.to(device=like.device, dtype=self.torch.int64)
        return self.torch.as_tensor(values, dtype=self.torch.int64, device=like.device)

    def compute_dtype(self, x):
        return self.torch.float64 if x.dtype == self.torch.float64 else self.torch.float32

    def cast(self, x, dtype):
        return x.to(dtype)

    def where(self, cond, a, b):
        return self.torch.where(cond, a, b)

    def cat(self, parts):
        return self.torch.cat(parts, dim=-1)

    def stack(self, parts):
        return self.torch.stack(parts, dim=-1)

    def repeat_rows(self, values, counts):
        return self.torch.repeat_interleave(values, counts)

    def write(self, target, values):
        target.copy_(values)


def _ops(x):
    torch = _torch_of(x)
    return _Torch(torch) if torch is not None else _Numpy


def _positions(ops, x, seqlen_offsets, cu_seqlens):
    """Integer positions broadcastable to x's rows: [batch, seqlen, 1] dense, [total, 1]
    packed."""
    if cu_seqlens is None:
        batch, seqlen = x.shape[0], x.shape[1]
        rows = ops.arange(seqlen, x)[None, :]
        offsets = ops.as_index(seqlen_offsets, x)
        offsets = offsets.reshape(-1, 1) if offsets.ndim else offsets
        return (rows + offsets)[..., None]
    cu = ops.as_index(cu_seqlens, x)
    lengths = cu[1:] - cu[:-1]
    sequence = ops.repeat_rows(ops.arange(lengths.shape[0], x), lengths)
    row = ops.arange(int(cu[-1]), x) - cu[:-1][sequence]
    offsets = ops.as_index(seqlen_offsets, x)
    shift = offsets[sequence] if offsets.ndim else offsets
    return (row + shift)[:, None]


def _angles(ops, table, positions, compute_dtype):
    """table rows at `positions`, with positions past the table read as angle 0 (cos 1,
    sin 0): [..., 1, rotary_dim / 2] in the compute dtype."""
    inside = positions < table.shape[0]
    clamped = ops.where(inside, positions, 0)
    rows = ops.cast(table, compute_dtype)[clamped]
    return rows, inside[..., None]


def _rotated(ops, x, cos, sin, positions, interleaved, conjugate):
    """The first rotary_dim columns of x rotated (compute dtype)."""
    rotary_dim = 2 * cos.shape[-1]
    dtype = ops.compute_dtype(x)
    c, inside = _angles(ops, cos, positions, dtype)
    s, _ = _angles(ops, sin, positions, dtype)
    c = ops.where(inside, c, 1.0)
    s = ops.where(inside, s, 0.0)
    if conjugate:
        s = -s
    part = ops.cast(x[..., :rotary_dim], dtype)
    if interleaved:
        first, second = part[..., 0::2], part[..., 1::2]
    else:
        first, second = part[..., :rotary_dim // 2], part[..., rotary_dim // 2:]
    out_first = first * c - second * s
    out_second = second * c + first * s
    if interleaved:
        flat_shape = tuple(part.shape)
        return ops.stack([out_first, out_second]).reshape(flat_shape)
    return ops.cat([out_first, out_second])


def _check(x, cos, sin, cu_seqlens):
    rank = 3 if cu_seqlens is not None else 4
    layout = ("[total_seqlen, nheads, headdim] (with cu_seqlens)" if cu_seqlens is not None
              else "[batch, seqlen, nheads, headdim]")
    if x.ndim != rank:
        raise invalid_argument("x", f"rank {rank} {layout}", f"shape {tuple(x.shape)}")
    if cos.ndim != 2 or tuple(sin.shape) != tuple(cos.shape):
        raise invalid_argument("cos", "cos and sin of one shape [seqlen_ro, rotary_dim / 2]",
                               f"cos {tuple(cos.shape)}, sin {tuple(sin.shape)}")
    if 2 * cos.shape[-1] > x.shape[-1]:
        raise invalid_argument("cos", f"rotary_dim = 2 * cos.shape[-1] <= headdim={x.shape[-1]}",
                               f"rotary_dim={2 * cos.shape[-1]}")


def _apply(x, cos, sin, interleaved, inplace, seqlen_offsets, cu_seqlens, conjugate=False):
    _check(x, cos, sin, cu_seqlens)
    ops = _ops(x)
    rotary_dim = 2 * cos.shape[-1]
    positions = _positions(ops, x, seqlen_offsets, cu_seqlens)
    packed_rows = positions.shape[0] if cu_seqlens is not None else x.shape[0]
    target = x[:packed_rows]  # packed rows past cu_seqlens[-1] belong to no sequence
    rotated = ops.cast(_rotated(ops, target, cos, sin, positions, interleaved, conjugate),
                       x.dtype)
    if inplace:
        ops.write(target[..., :rotary_dim], rotated)
        return x
    if packed_rows == x.shape[0] and rotary_dim == x.shape[-1]:
        return rotated
    out = x.clone() if _torch_of(x) is not None else x.copy()
    ops.write(out[:packed_rows, ..., :rotary_dim], rotated)
    return out


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0,
                     cu_seqlens=None, max_seqlen=None):
    """x [batch, seqlen, nheads, headdim] (or packed [total_seqlen, nheads, headdim] with
    int32 cu_seqlens [batch + 1]) rotated by cos/sin [seqlen_ro, rotary_dim / 2] on its
    first rotary_dim columns. seqlen_offsets: int or [batch], added to each row's position.
    inplace writes the result into x and returns x. max_seqlen is accepted for flash-attn's
    signature and not needed."""
    return _apply(x, cos, sin, interleaved, inplace, seqlen_offsets, cu_seqlens)


# flash-attn's older name for the same function.
apply_rotary_emb_func = apply_rotary_emb


def _split_qkv(qkv, num_heads_q):
    """(q, k) views of a packed qkv: [b, s, 3, h, d], or [b, s, hq + 2 * hk, d] with
    num_heads_q."""
    if qkv.ndim == 5:
        if qkv.shape[2] != 3:
            raise invalid_argument("qkv", "[batch, seqlen, 3, nheads, headdim]",
                                   f"shape {tuple(qkv.shape)}")
        return qkv[:, :, 0], qkv[:, :, 1]
    if qkv.ndim != 4 or num_heads_q is None:
        raise invalid_argument("qkv", "[batch, seqlen, 3, nheads, headdim], or "
                               "[batch, seqlen, nheads_q + 2 * nheads_k, headdim] with num_heads_q",
                               f"shape {tuple(qkv.shape)}, num_heads_q={num_heads_q}")
    num_heads_k = (qkv.shape[2] - num_heads_q) // 2
    if num_heads_q + 2 * num_heads_k != qkv.shape[2]:
        raise invalid_argument("num_heads_q", f"nheads_q leaving an even count of the "
                               f"{qkv.shape[2]} heads for k and v", str(num_heads_q))
    return qkv[:, :, :num_heads_q], qkv[:, :, num_heads_q:num_heads_q + num_heads_k]


def apply_rotary_emb_qkv_(qkv, cos, sin, cos_k=None, sin_k=None, interleaved=False,
                          seqlen_offsets=0, num_heads_q=None):
    """Rotates q and k of a packed qkv in place (k by cos_k/sin_k when given); returns qkv."""
    q, k = _split_qkv(qkv, num_heads_q)
    _apply(q, cos, sin, interleaved, True, seqlen_offsets, None)
    _apply(k, cos if cos_k is None else cos_k, sin if sin_k is None else sin_k, interleaved,
           True, seqlen_offsets, None)
    return qkv


def apply_rotary_emb_kv_(kv, cos, sin, interleaved=False, seqlen_offsets=0):
    """Rotates k of kv [batch, seqlen, 2, nheads_k, headdim] in place; returns kv."""
    if kv.ndim != 5 or kv.shape[2] != 2:
        raise invalid_argument("kv", "[batch, seqlen, 2, nheads_k, headdim]",
                               f"shape {tuple(kv.shape)}")
    _apply(kv[:, :, 0], cos, sin, interleaved, True, seqlen_offsets, None)
    return kv


def __getattr__(name):
    if name == "RotaryEmbedding":  # a torch.nn.Module: only defined once torch is wanted
        from ._torch_rotary import RotaryEmbedding
        return RotaryEmbedding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
