"""One ring step's planned calls (_blocks.Call) run through flashattn's own forward and
backward (the computations behind torch.ops.flashattn.forward / backward)."""
import copy

import torch

from .. import _torch_ops
from .._calls import Options


class DeviceCall:
    """A planned call with its tensors on the device: cu_seqlens, ALiBi slopes per
    sequence of the call (sign included), and the lse correction of its rows."""

    def __init__(self, call, rows_q, alibi_slopes, device):
        self.window = call.window
        self.cu_q = _offsets(call.seqlens_q, device)
        self.cu_k = _offsets(call.seqlens_k, device)
        self.max_q = max(call.seqlens_q, default=0)
        self.max_k = max(call.seqlens_k, default=0)
        self.slopes = self.lse_shift = None
        if alibi_slopes is None:
            return
        seqs = [r.seq if r is not None else 0 for r in call.rects]
        signs = [float(r.alibi_sign) if r is not None else 0.0 for r in call.rects]
        self.slopes = (_slopes_of(alibi_slopes, seqs)
                       * torch.tensor(signs, device=device)[:, None]).contiguous()
        shifts = [r for r in call.rects if r is not None and r.alibi_shift]
        if shifts:
            row_seq = torch.zeros(rows_q, dtype=torch.long)
            row_shift = torch.zeros(rows_q, dtype=torch.float32)
            for r in shifts:
                row_seq[r.q_start:r.q_start + r.q_len] = r.seq
                row_shift[r.q_start:r.q_start + r.q_len] = float(r.alibi_shift)
            per_row = _slopes_of(alibi_slopes, row_seq.to(device))  # [rows, heads]
            self.lse_shift = (per_row * row_shift.to(device)[:, None]).t().contiguous()

    def for_heads(self, heads):
        """This call on the query heads `heads` (a slice) alone."""
        part = copy.copy(self)
        if self.slopes is not None:
            part.slopes = self.slopes[:, heads].contiguous()
        if self.lse_shift is not None:
            part.lse_shift = self.lse_shift[heads].contiguous()
        return part

    def options(self, softmax_scale, softcap):
        return Options(softmax_scale, False, self.window, softcap, self.slopes)


def _offsets(lengths, device):
    offsets = [0]
    for n in lengths:
        offsets.append(offsets[-1] + n)
    return torch.tensor(offsets, dtype=torch.int32, device=device)


def _slopes_of(alibi_slopes, seqs):
    """Slopes [len(seqs), heads]: shared [heads] slopes, or rows of [batch, heads]."""
    if alibi_slopes.dim() == 1:
        return alibi_slopes[None].expand(len(seqs), -1)
    index = seqs if isinstance(seqs, torch.Tensor) else torch.tensor(seqs)
    return alibi_slopes[index.to(alibi_slopes.device)]


def forward(call, q, k, v, softmax_scale, softcap, out=None):
    """(out, lse) of one call: out [rows_q, heads, d_v] in q's dtype (written into `out`
    when given), lse [heads, rows_q] fp32, both over every query row (rows outside its
    rectangles: 0 and -inf)."""
    out, lse, _ = _torch_ops.forward_with_options(
        q, k, v, call.cu_q, call.cu_k, None, call.max_q, call.max_k,
        call.options(softmax_scale, softcap), out=out)
    if call.lse_shift is not None:
        lse += call.lse_shift
    return out, lse


def backward(call, dout, q, k, v, out, lse, softmax_scale, softcap, deterministic,
             grads=None):
    """(dq, dk, dv) of one call, given the merged out and lse of the whole forward; written
    into `grads` (tensors shaped like q, k, v, in their dtype) when given."""
    if call.lse_shift is not None:
        lse = lse - call.lse_shift
    return _torch_ops.backward_with_options(
        dout, q, k, v, out, lse, call.cu_q, call.cu_k, None, call.max_q, call.max_k,
        call.options(softmax_scale, softcap), deterministic, grads)
