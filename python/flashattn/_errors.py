"""The library's exception classes (defined by the binding) and the Python layer's own
messages in the library's wording: "<argument>: expected <what>, got <what>"."""
from ._C import CudaError, Error, InternalError, InvalidArgumentError, UnsupportedError

__all__ = ["Error", "InvalidArgumentError", "UnsupportedError", "CudaError", "InternalError",
           "invalid_argument"]


def invalid_argument(name, expected, got):
    return InvalidArgumentError(f"{name}: expected {expected}, got {got}")
