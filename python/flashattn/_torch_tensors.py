"""torch tensors as flashattn tensors: descriptions for the binding, allocation through
torch's allocator, and the current CUDA stream. Only data_ptr(), stride() and the device
cross into the library, so any torch version works with one build."""
import torch

from . import _C
from ._errors import invalid_argument

_DTYPES = {
    torch.float32: _C.DType.F32,
    torch.float16: _C.DType.F16,
    torch.bfloat16: _C.DType.BF16,
    torch.int32: _C.DType.I32,
}


# Per-call paths avoid tensor.device.type and torch.cuda.current_stream(device): each
# builds Python objects (a device, a string, a Stream) that cost microseconds per call.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _device_of(tensor):
    if tensor.is_cuda:
        return _C.DeviceType.CUDA, tensor.get_device()
    if tensor.device.type == "cpu":
        return _C.DeviceType.CPU, 0
    raise invalid_argument("q", "a cpu or cuda tensor", f"device {tensor.device}")


def _stream_of(tensor):
    if _current_raw_stream is not None:
        return _current_raw_stream(tensor.get_device())
    return torch.cuda.current_stream(tensor.device).cuda_stream


class TorchTensors:
    """The adapter the framework-neutral calls (_calls.py) use for torch inputs."""

    name = "torch"

    @staticmethod
    def is_cuda(tensor):
        return tensor.is_cuda

    @staticmethod
    def describe(tensor, name):
        if tensor is None:
            return _C.Tensor()
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
        dtype = _DTYPES.get(tensor.dtype)
        if dtype is None:
            raise invalid_argument(name, "dtype float32, float16, bfloat16 (or int32 for indices)",
                                   str(tensor.dtype).replace("torch.", ""))
        device_type, device_index = _device_of(tensor)
        # The binding normalizes the strides of size-1 dimensions.
        return _C.Tensor(tensor.data_ptr(), dtype, tensor.shape, tensor.stride(), device_type,
                         device_index)

    @staticmethod
    def expect_writable(tensor, name):
        """torch tensors are always writable (the custom op declares the mutation)."""

    @staticmethod
    def empty(like, shape, float32=False):
        return like.new_empty(shape, dtype=torch.float32 if float32 else like.dtype)

    @staticmethod
    def launch(like, workspace_bytes):
        """A Launch on `like`'s device: the current CUDA stream and, when the call needs
        one, a workspace from torch's allocator (returned so it outlives the call)."""
        launch = _C.Launch()
        workspace = None
        if like.is_cuda:
            launch.backend = _C.Backend.CUDA
            launch.stream = _stream_of(like)
        else:
            launch.backend = _C.Backend.CPU
        if workspace_bytes:
            workspace = like.new_empty((workspace_bytes,), dtype=torch.uint8)
            launch.workspace = workspace.data_ptr()
            launch.workspace_bytes = workspace_bytes
        return launch, workspace

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
