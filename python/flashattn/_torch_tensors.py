"""torch tensors for the library: registered with the binding, which reads each call's
tensors itself (data_ptr(), shape, stride(), dtype, device) in one crossing per call, and
the helpers the torch paths share: the current CUDA stream, input conversions. Only those
attributes cross into the library, so any torch version works with one build."""
import torch

from . import _C
from ._errors import invalid_argument

_DTYPES = {
    torch.float32: _C.DType.F32,
    torch.float16: _C.DType.F16,
    torch.bfloat16: _C.DType.BF16,
    torch.int32: _C.DType.I32,
}
if hasattr(torch, "float8_e4m3fn"):
    _DTYPES[torch.float8_e4m3fn] = _C.DType.F8E4M3


def _workspace_bytes(like, nbytes):
    """A call's workspace, asked for by the library once it has sized it: torch's caching
    allocator orders its reuse after the work queued on the current stream."""
    return like.new_empty((nbytes,), dtype=torch.uint8)


_C.register_tensor_framework(torch.Tensor, "torch.Tensor", _DTYPES, _workspace_bytes)

# torch.cuda.current_stream(device) builds a Stream object per call (microseconds); the
# raw getter returns the handle as an int.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(tensor):
    """The current CUDA stream of `tensor`'s device as an int (0 for a CPU tensor)."""
    if not tensor.is_cuda:
        return 0
    if _current_raw_stream is not None:
        return _current_raw_stream(tensor.get_device())
    return torch.cuda.current_stream(tensor.device).cuda_stream


class TorchTensors:
    """Input conversions of the flash_attn functions (interface.py) for torch tensors."""

    name = "torch"

    @staticmethod
    def readable(tensor, name):
        """`tensor` with a contiguous last dimension (copied if it has not)."""
        if tensor is None:
            return None
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() and tensor.stride(-1) != 1 and tensor.shape[-1] != 1:
            return tensor.contiguous()
        return tensor

    @staticmethod
    def indices(values, name):
        if values is None:
            return None
        if not isinstance(values, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(values).__name__}")
        if values.dtype is torch.int32 and values.is_contiguous():
            return values
        if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
            raise invalid_argument(name, "an integer tensor (int32)",
                                   str(values.dtype).replace("torch.", ""))
        if values.dtype != torch.int32 and values.numel():
            # Other integer dtypes are converted; a value that does not fit int32 would wrap.
            # (Reading the check's result is a host sync for CUDA tensors, as any conversion
            # that must be validated is: pass int32 to avoid it.)
            outside = (values < -2**31) | (values > 2**31 - 1)
            if bool(outside.any()):
                where = [int(i) for i in outside.nonzero()[0]]
                raise invalid_argument(name, "values that fit int32 (|x| < 2^31)",
                                       f"{int(values[tuple(where)])} at {where}")
        return values.to(torch.int32).contiguous()

    @staticmethod
    def full_indices(like, count, value):
        return torch.full((count,), value, dtype=torch.int32, device=like.device)
