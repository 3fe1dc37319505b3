"""The optional torch extension (python/torch_ext, libflashattn_torch.so): the eager
attention of torch tensors as a C++ torch::autograd::Function, so that a training step's
backward node is C++ and not Python (_torch_eager._Attention), which is most of what a short
call's forward + backward costs on the host.

The library links the torch it was built against, so it is loaded only under that torch
(same torch.__version__, same CUDA-ness: _torch_ext_build.py, written by the build), lazily
at the first call, and not at all with FLASHATTN_TORCH_EXT=0 in the environment (read at
that first call). Without it, or for inputs it does not take, the Python path runs, with the
same results bit for bit: both make the same library calls with the same arguments, the
extension through the C ABI entry points linked into flashattn._C (no second copy of the
library). torch.compile, fake tensors, opcheck and CUDA graphs keep the torch.library ops of
_torch_ops.py; this is only ever called eagerly on plain tensors.
"""
import os

import torch

from . import _C
from ._errors import CudaError, InternalError, InvalidArgumentError, UnsupportedError

_NOT_LOADED = object()
_op = _NOT_LOADED  # the attention op's callable once loaded, None when unavailable
_status = "not loaded yet"

# The extension's failures of a forward: "[flashattn <code>] <message>" (library.hpp).
_TAG = "[flashattn "
_ERRORS = {"1": InvalidArgumentError, "2": UnsupportedError, "3": CudaError, "4": InternalError}


def built_for(version, cuda, running=torch):
    """Whether a library built against torch `version` (torch.__version__) with CUDA
    `cuda` (torch.version.cuda, "" for none) can run under the torch module `running`."""
    return running.__version__ == version and bool(running.version.cuda) == bool(cuda)


def _load():
    global _op, _status
    _op = None
    if os.environ.get("FLASHATTN_TORCH_EXT", "").strip().lower() in ("0", "off", "false", "no"):
        _status = "disabled by FLASHATTN_TORCH_EXT"
        return None
    try:
        from . import _torch_ext_build as build
    except ImportError:
        _status = "not built (the build's Python had no torch, or FLASHATTN_TORCH_EXT=OFF)"
        return None
    if not built_for(build.TORCH_VERSION, build.TORCH_CUDA):
        _status = (f"built for torch {build.TORCH_VERSION} (CUDA {build.TORCH_CUDA or 'none'}), "
                   f"running {torch.__version__} (CUDA {torch.version.cuda or 'none'})")
        return None
    try:
        torch.ops.load_library(os.path.join(os.path.dirname(__file__), build.LIBRARY))
        ops = torch.ops.flashattn_cxx
        ops.set_library_table(_C.library_table())
        overload = ops.attention.default
    except (OSError, RuntimeError, AttributeError) as e:
        _status = f"failed to load: {e}"
        return None
    # The overload's own callable, without OpOverload.__call__'s Python frame.
    _op = getattr(overload, "_op", overload)
    _status = "loaded"
    return _op


def status():
    """"loaded", or why the extension is not used (after the first call)."""
    return _status


def attention(q, k, v, varlen, options, deterministic, with_lse=True):
    """_torch_eager.attention's (out, lse, rng_state), or None when the extension is not
    there or does not take these arguments (nothing has run then). `varlen` is
    (cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k); lse is None
    without with_lse when no gradient is needed."""
    op = _op
    if op is _NOT_LOADED:
        op = _load()
    if op is None:
        return None
    cu_q, cu_k, used_k, max_q, max_k = varlen
    left, right = options.window_size
    try:
        return op(q, k, v, cu_q, cu_k, used_k, max_q, max_k, options.dropout_p,
                  options.softmax_scale, options.causal, left, right, options.softcap,
                  options.alibi_slopes, deterministic, with_lse)
    except Exception as error:  # noqa: BLE001 -- sorted out below
        return _failed(error)


def _failed(error):
    """Raises the library's exception for a call the library rejected; None (the Python
    path takes the call, and reports what is wrong in its own words) for arguments the
    op's schema or the extension did not take."""
    text = str(error)
    if text.startswith(_TAG):
        code, _, message = text[len(_TAG):].partition("] ")
        if code in _ERRORS:
            raise _ERRORS[code](message) from None
    return None
