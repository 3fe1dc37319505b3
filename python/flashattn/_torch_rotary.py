"""flash_attn.layers.rotary.RotaryEmbedding: a torch module that keeps the cos/sin tables
of a rotary embedding and rotates q and k (packed qkv, or q with packed kv) in place."""
import torch

from .rotary import apply_rotary_emb, apply_rotary_emb_kv_, apply_rotary_emb_qkv_


class RotaryEmbedding(torch.nn.Module):
    """Rotary embedding over the first `dim` columns of each head, frequencies
    base ** (-2i / dim). With scale_base, XPos (Sun et al. 2022): q's angles are scaled by
    zeta ** (position / scale_base) and k's by its inverse, position counted from the middle
    of the table, with zeta_i = (2i + 0.4 dim) / (1.4 dim)."""

    def __init__(self, dim, base=10000.0, interleaved=False, scale_base=None, device=None):
        super().__init__()
        self.dim = dim
        self.base = float(base)
        self.interleaved = interleaved
        self.scale_base = scale_base
        self.register_buffer("inv_freq", self._compute_inv_freq(device), persistent=False)
        scale = None
        if scale_base is not None:
            columns = torch.arange(0, dim, 2, device=device, dtype=torch.float32)
            scale = (columns + 0.4 * dim) / (1.4 * dim)
        self.register_buffer("scale", scale, persistent=False)
        self._seq_len_cached = 0
        self._cos_cached = self._sin_cached = None
        self._cos_k_cached = self._sin_k_cached = None

    def _compute_inv_freq(self, device=None):
        exponents = torch.arange(0, self.dim, 2, device=device, dtype=torch.float32) / self.dim
        return 1.0 / (self.base ** exponents)

    def _update_cos_sin_cache(self, seqlen, device=None, dtype=None):
        """Tables for positions 0..seqlen-1 in `dtype`, rebuilt when longer ones are needed,
        or the device or dtype changed, or training follows inference mode."""
        if (seqlen <= self._seq_len_cached and self._cos_cached is not None
                and self._cos_cached.device == device and self._cos_cached.dtype == dtype
                and not (self.training and self._cos_cached.is_inference())):
            return
        self._seq_len_cached = seqlen
        # Angles in fp32 whatever the module's dtype: bf16 positions or frequencies would
        # move the angles of long sequences by whole radians.
        positions = torch.arange(seqlen, device=device, dtype=torch.float32)
        inv_freq = (self.inv_freq if self.inv_freq.dtype == torch.float32
                    else self._compute_inv_freq(device))
        angles = torch.outer(positions, inv_freq.to(device))
        cos, sin = torch.cos(angles), torch.sin(angles)
        if self.scale is None:
            self._cos_cached, self._sin_cached = cos.to(dtype), sin.to(dtype)
            return
        power = (torch.arange(seqlen, device=device, dtype=torch.float32) - seqlen // 2)
        zeta = self.scale.to(device) ** (power / self.scale_base)[:, None]
        self._cos_cached, self._sin_cached = (cos * zeta).to(dtype), (sin * zeta).to(dtype)
        self._cos_k_cached, self._sin_k_cached = (cos / zeta).to(dtype), (sin / zeta).to(dtype)

    def forward(self, qkv, kv=None, seqlen_offset=0, max_seqlen=None, num_heads_q=None):
        """qkv [batch, seqlen, 3, nheads, headdim] (or [batch, seqlen, nheads_q + 2 *
        nheads_k, headdim] with num_heads_q), or q [batch, seqlen, nheads, headdim] when kv
        [batch, seqlen, 2, nheads_k, headdim] is given: rotated in place and returned.
        seqlen_offset: int or [batch]; with a tensor, max_seqlen sizes the tables."""
        seqlen = qkv.shape[1]
        if max_seqlen is not None:
            self._update_cos_sin_cache(max_seqlen, device=qkv.device, dtype=qkv.dtype)
        elif isinstance(seqlen_offset, int):
            self._update_cos_sin_cache(seqlen + seqlen_offset, device=qkv.device, dtype=qkv.dtype)
        xpos = self.scale is not None
        cos_k = self._cos_k_cached if xpos else self._cos_cached
        sin_k = self._sin_k_cached if xpos else self._sin_cached
        if kv is None:
            return apply_rotary_emb_qkv_(qkv, self._cos_cached, self._sin_cached, cos_k, sin_k,
                                         interleaved=self.interleaved,
                                         seqlen_offsets=seqlen_offset, num_heads_q=num_heads_q)
        q = apply_rotary_emb(qkv, self._cos_cached, self._sin_cached, interleaved=self.interleaved,
                             inplace=True, seqlen_offsets=seqlen_offset)
        kv = apply_rotary_emb_kv_(kv, cos_k, sin_k, interleaved=self.interleaved,
                                  seqlen_offsets=seqlen_offset)
        return q, kv
