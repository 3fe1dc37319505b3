"""flash_attn_interface, FlashAttention-3's Python module, served by flashattn.

Installed as the distribution `flash-attn-3` (this repository's compat/fa3/), it makes
Transformers' attn_implementation="flash_attention_3", and code that imports
flash_attn_interface, run flashattn's kernels with FlashAttention-3's arguments and return
values (flashattn.fa3 says which of its arguments flashattn does not serve).
"""
from flashattn.fa3 import (  # noqa: F401
    flash_attn_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_with_kvcache,
)

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_with_kvcache"]
