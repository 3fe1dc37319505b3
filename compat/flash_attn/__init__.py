"""flash_attn, FlashAttention-2.8's Python API, served by flashattn.

Installed as the distribution `flash-attn` (this repository's compat/), it makes code that
imports flash_attn, and Transformers' attn_implementation="flash_attention_2", run
flashattn's kernels: the functions are flashattn's own (flashattn.interface), which take
flash-attn 2.8's arguments and return its values. flash_attn.bert_padding and
flash_attn.layers.rotary are there too; FlashAttention's modules that are not attention
(fused layer norm, cross entropy, fused dense, models, ...) raise an ImportError.
"""
from flashattn.interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

from . import _attention_only

# The distribution's version (compat/pyproject.toml): flash-attn's API version, then the
# flashattn that serves it.
__version__ = "2.8.3+flashattn.0.1.0"

__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
]

_attention_only.install()
