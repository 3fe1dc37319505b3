"""The literal attention in float64 torch, differentiable: the oracle of the torch tests'
gradients (autograd through it). Layouts as flash_attn: q [b, sq, h, d], k/v [b, sk, hk, d]."""
import torch

from reference_attention import visible_keys


def attention(q, k, v, softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0,
              alibi_slopes=None, keep=None, dropout_p=0.0):
    """out [b, sq, h, dv] in float64; keep: bool [b, h, sq, sk] (dropout's survivors)."""
    batch, rows, heads, dim = q.shape
    cols, group = k.shape[1], heads // k.shape[2]
    scale = dim ** -0.5 if softmax_scale is None else softmax_scale
    keys = k.double().repeat_interleave(group, dim=2)
    values = v.double().repeat_interleave(group, dim=2)
    scores = scale * torch.einsum("bihd,bjhd->bhij", q.double(), keys)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi_slopes is not None:
        slopes = alibi_slopes.double().to(q.device)
        slopes = slopes[:, :, None, None] if slopes.dim() == 2 else slopes[None, :, None, None]
        i = torch.arange(rows, device=q.device)[:, None]
        j = torch.arange(cols, device=q.device)[None, :]
        scores = scores - slopes * (i + cols - rows - j).abs()
    visible = torch.from_numpy(visible_keys(rows, cols, causal, window)).to(q.device)
    probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    probs = torch.where(visible.any(dim=-1)[:, None], probs, torch.zeros_like(probs))
    if keep is not None:
        probs = probs * keep.to(q.device) / (1 - dropout_p)
    return torch.einsum("bhij,bjhd->bihd", probs, values)
