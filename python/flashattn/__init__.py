"""flashattn: exact attention (FlashAttention-2) in C++/CUDA with a tiled CPU backend.

`from flashattn import flash_attn_func` is flash-attn 2.8's function on torch tensors
(CUDA or CPU) and numpy arrays. flashattn.arrays has the explicit numpy calls (backward
included), flashattn.hf the Hugging Face Transformers integration.
"""
from . import _C
from ._errors import CudaError, Error, InternalError, InvalidArgumentError, UnsupportedError
from .bert_padding import pad_input, unpad_input
from .interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

try:  # torch is optional: with it, torch.ops.flashattn.* exist from import on.
    import torch as _torch
except ImportError:
    _torch = None
if _torch is not None:
    from . import _torch_ops  # noqa: F401

__version__ = _C.version()
cuda_available = _C.cuda_available

__all__ = [
    "flash_attn_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_with_kvcache",
    "unpad_input",
    "pad_input",
    "cuda_available",
    "Error",
    "InvalidArgumentError",
    "UnsupportedError",
    "CudaError",
    "InternalError",
]
