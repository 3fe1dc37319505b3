"""Dropout seeds from torch's generators, so torch.manual_seed reproduces a run.

CUDA tensors take the device generator's Philox seed and reserve an offset from it (as
torch's own dropout does), so dropout never consumes the CPU generator that data loading
may use; CPU tensors draw from the CPU generator. The pair is returned as `rng_state`
(int64 [2], host memory) and handed back to the backward, which regenerates the mask.
"""
import torch

# torch requires philox offsets in multiples of 4; one call uses one offset value (the
# library mixes it into the Philox counter), so 4 reserves it.
_OFFSET_STEP = 4


def _from_cuda_generator(device):
    generator = torch.cuda.default_generators[
        device.index if device.index is not None else torch.cuda.current_device()]
    offset = generator.get_offset()
    generator.set_offset(offset + _OFFSET_STEP)
    return generator.initial_seed(), offset


def take_seed_offset(device):
    """(seed, offset) for one dropout call on `device`, advancing its generator."""
    if device.type == "cuda":
        try:
            return _from_cuda_generator(device)
        except RuntimeError:
            pass  # a generator that cannot move its offset now (e.g. during graph capture)
    seed, offset = torch.randint(0, 2**62, (2,), dtype=torch.int64).tolist()
    return seed, offset


def as_rng_state(seed, offset):
    """int64 [2] on the host; seeds above 2**63 are stored in two's complement."""
    def signed(value):
        return value - 2**64 if value >= 2**63 else value
    return torch.tensor([signed(seed), signed(offset)], dtype=torch.int64)


def from_rng_state(rng_state):
    seed, offset = rng_state.tolist()
    return seed & 0xFFFFFFFFFFFFFFFF, offset & 0xFFFFFFFFFFFFFFFF
