"""flash_attn.flash_attn_interface: the attention functions (flashattn's)."""
from flashattn.interface import (  # noqa: F401
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """FlashAttention-2 uses its kernels' key block size to decode the probabilities that
    return_attn_probs gives (S_dmask, normalized block by block by a running maximum).
    flashattn's are the exact probabilities, without that encoding, so no block size
    describes them."""
    raise NotImplementedError(
        "_get_block_size_n: flashattn's return_attn_probs gives the exact attention "
        "probabilities (dropped elements negated), not FlashAttention-2's block-wise S_dmask "
        "encoding, so there is no kernel block size to decode it with")
