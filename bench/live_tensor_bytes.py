"""Byte accounting of the tensors torch code allocates: how many bytes of them are alive at
once, at most (the peak), on any device, without a GPU's allocator statistics.

A TorchDispatchMode sees every aten op; an op whose schema returns no alias (no view, no
in-place or out= result) returns freshly allocated tensors, whose storages are counted
until a finalizer on each storage sees it freed. Allocations inside one op's own
implementation (a CPU kernel's temporaries, a CUDA kernel's workspace taken below aten)
are not seen: the count is of tensors, i.e. what the code holds, not what the device's
allocator rounds it to.

    with LiveTensorBytes() as counter:
        out = f(x); out.backward(g)
    counter.peak  # bytes, above what was alive before the `with`
"""
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class LiveTensorBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live = 0   # bytes of counted storages alive now
        self.peak = 0   # the largest `live` seen
        self._alive = set()  # data pointers of counted storages

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if not any(r.alias_info is not None for r in func._schema.returns):
            for tensor in tree_leaves(result):
                if isinstance(tensor, torch.Tensor):
                    self._count(tensor.untyped_storage())
        return result

    def _count(self, storage):
        pointer, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or pointer in self._alive:
            return
        self._alive.add(pointer)
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._freed, pointer, size)

    def _freed(self, pointer, size):
        self._alive.discard(pointer)
        self.live -= size
