"""Dropout's Philox key from torch's generators, so torch.manual_seed reproduces a run.

A dropout call draws its (seed, offset) with a torch operation into an int64 [2] tensor on
q's device (the CUDA device's generator for CUDA tensors, so dropout never consumes the CPU
generator that data loading may use; the CPU generator for CPU tensors), and the library
reads the pair from that tensor when the call runs (AttentionOptions::dropout_seed_offset).
Drawn by a torch operation, the pair is graph-safe: a captured CUDA graph draws it again on
every replay, as PyTorch's own dropout does, so each replay drops fresh elements, the ones an
eager call drops from the same generator state. The tensor is returned as `rng_state` and
handed back to the backward, which reads the same pair without a synchronization.
"""
import torch


def draw_seed_offset(device):
    """int64 [2] on `device`: (seed, offset), each uniform in [0, 2^63)."""
    return torch.empty((2,), dtype=torch.int64, device=device).random_()


def from_rng_state(rng_state):
    """The (seed, offset) ints of an rng_state (a device-to-host copy for CUDA tensors)."""
    seed, offset = rng_state.tolist()
    return seed & 0xFFFFFFFFFFFFFFFF, offset & 0xFFFFFFFFFFFFFFFF
