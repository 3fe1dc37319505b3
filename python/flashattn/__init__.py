"""flashattn: exact attention (FlashAttention-2) in C++/CUDA with a tiled CPU backend.

`from flashattn import flash_attn_func` is flash-attn 2.8's function on torch tensors
(CUDA or CPU) and numpy arrays. flashattn.arrays has the explicit numpy calls (backward
included), flashattn.hf the Hugging Face Transformers integration, flashattn.torch the
routing of torch's scaled_dot_product_attention to these kernels, flashattn.distributed
attention over a sequence sharded across torch.distributed ranks (ring and Ulysses).
"""
from . import _C
from ._errors import CudaError, Error, InternalError, InvalidArgumentError, UnsupportedError
from .bert_padding import pad_input, unpad_input
from . import interface as _interface
from .interface import *  # noqa: F401,F403 -- the flash_attn_* family, listed in interface.__all__

try:  # torch is optional: with it, torch.ops.flashattn.* exist from import on.
    import torch as _torch
except ImportError:
    _torch = None
if _torch is not None:
    from . import _torch_ops  # noqa: F401

__version__ = _C.version()
cuda_available = _C.cuda_available

__all__ = _interface.__all__ + [
    "unpad_input",
    "pad_input",
    "cuda_available",
    "Error",
    "InvalidArgumentError",
    "UnsupportedError",
    "CudaError",
    "InternalError",
]
