"""numpy arrays as flashattn tensors: descriptions for the binding, host allocation.

numpy has no bfloat16 nor FP8; arrays of ml_dtypes.bfloat16 and ml_dtypes.float8_e4m3fn
(what JAX and others use) are accepted by dtype name, without importing ml_dtypes here.
"""
import numpy as np

from . import _C
from ._errors import invalid_argument

_DTYPES = {
    np.dtype(np.float32): _C.DType.F32,
    np.dtype(np.float16): _C.DType.F16,
    np.dtype(np.int32): _C.DType.I32,
}


_BY_NAME = {"bfloat16": _C.DType.BF16, "float8_e4m3fn": _C.DType.F8E4M3}


def _dtype_of(array):
    if not array.dtype.isnative:
        return None
    dtype = _DTYPES.get(array.dtype)
    if dtype is None:
        dtype = _BY_NAME.get(array.dtype.name)
    return dtype


def _is_describable(array):
    """Whether the binding can take `array` as it is: strides of whole, non-negative elements."""
    itemsize = array.itemsize
    return all(s >= 0 and s % itemsize == 0 for s in array.strides)


class NumpyArrays:
    """The adapter the framework-neutral calls (_calls.py) use for numpy inputs."""

    name = "numpy"

    @staticmethod
    def is_cuda(array):
        return False

    @staticmethod
    def describe(array, name):
        if array is None:
            return _C.Tensor()
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name}: expected a numpy array, got {type(array).__name__}")
        dtype = _dtype_of(array)
        if dtype is None:
            if not array.dtype.isnative:
                raise invalid_argument(name, "an array in the machine's byte order",
                                       f"byte-swapped {array.dtype.name} ({array.dtype.str})")
            raise invalid_argument(
                name, "dtype float32, float16, bfloat16, float8_e4m3fn (or int32 for indices)",
                array.dtype.name)
        if not _is_describable(array):
            raise invalid_argument(name, "non-negative strides in whole elements",
                                   f"strides {array.strides} (bytes)")
        strides = [s // array.itemsize for s in array.strides]
        return _C.Tensor(array.__array_interface__["data"][0], dtype, array.shape, strides)

    @staticmethod
    def expect_writable(array, name):
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            raise invalid_argument(name, "a writable array (it is updated in place)",
                                   "a read-only array")

    @staticmethod
    def empty(like, shape, float32=False):
        return np.empty(shape, dtype=np.float32 if float32 else like.dtype)

    @staticmethod
    def empty_bf16(like, shape):
        """The output of an e4m3 call (ml_dtypes is there: the input's dtype came from it)."""
        import ml_dtypes
        return np.empty(shape, dtype=ml_dtypes.bfloat16)

    @staticmethod
    def is_e4m3(array):
        return array is not None and array.dtype.name == "float8_e4m3fn"

    @staticmethod
    def launch(like, workspace_bytes):
        launch = _C.Launch()
        launch.backend = _C.Backend.CPU
        if workspace_bytes:
            buffer = np.empty(workspace_bytes, dtype=np.uint8)
            launch.workspace = buffer.__array_interface__["data"][0]
            launch.workspace_bytes = workspace_bytes
            return launch, buffer
        return launch, None

    @staticmethod
    def readable(array, name):
        """`array` in a layout the library reads (last dimension contiguous), copied if not."""
        if array is None:
            return None
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name}: expected a numpy array, got {type(array).__name__}")
        last_strided = array.ndim and array.strides[-1] != array.itemsize and array.shape[-1] != 1
        if array.size and (last_strided or not _is_describable(array)):
            return np.ascontiguousarray(array)
        return array

    @staticmethod
    def indices(values, name):
        """Index arguments (cu_seqlens, cache_seqlens, block_table, ...) as int32 arrays."""
        if values is None:
            return None
        array = np.asarray(values)
        if array.dtype.kind not in "iu":
            raise invalid_argument(name, "an integer array (int32)", array.dtype.name)
        if array.dtype != np.int32 and array.size:
            outside = (array < -2**31) | (array > 2**31 - 1)
            if outside.any():
                where = tuple(int(i) for i in np.argwhere(outside)[0])
                raise invalid_argument(name, "values that fit int32 (|x| < 2^31)",
                                       f"{int(array[where])} at {list(where)}")
        return np.ascontiguousarray(array, dtype=np.int32)

    @staticmethod
    def full_indices(like, count, value):
        return np.full((count,), value, dtype=np.int32)
