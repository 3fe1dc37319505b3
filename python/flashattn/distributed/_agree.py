"""Every rank's view of the call, exchanged before any K/V moves: a rank whose arguments
were rejected makes every rank raise (instead of leaving the others waiting for blocks
that never come), and shapes that differ between ranks are an error, not a hang."""
import torch
import torch.distributed as dist

from .._errors import InvalidArgumentError


def collective_device(group, like):
    """NCCL gathers CUDA tensors; every other backend here (gloo) gathers CPU tensors."""
    return like.device if dist.get_backend(group) == "nccl" else torch.device("cpu")


def gather_ints(values, group, device, dtype=torch.int64):
    """values (a list of ints, the same length on every rank) from every rank."""
    mine = torch.tensor(values, dtype=dtype, device=device)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    return [t.tolist() for t in every]


def agree(function, error, header, lengths, group, device):
    """Raises `error` (this rank's own rejection, or None) on every rank that has one, and
    on the others an error naming the first rank that rejected its call; then checks that
    `header` ({name: number} that must match; the same names on every rank) is the same on
    every rank. Returns every rank's `lengths` (ints; as many on every rank once the
    headers match)."""
    names = ["sequences"] + list(header)
    # float64 holds the header's ints exactly and its floats (softcap, scale) as they are.
    headers = gather_ints([0 if error is None else 1, len(lengths)] + list(header.values()),
                          group, device, torch.float64)
    if error is not None:
        raise error
    rejected = [r for r, h in enumerate(headers) if h[0]]
    if rejected:
        raise InvalidArgumentError(f"{function}: rank {rejected[0]} of the process group "
                                   "rejected its arguments (its own error says why)")
    for r, h in enumerate(headers):
        for name, mine, theirs in zip(names, headers[0][1:], h[1:]):
            if mine != theirs:
                raise InvalidArgumentError(
                    f"{function}: expected the same {name} on every rank of the process "
                    f"group, got {_text(mine)} on rank 0 and {_text(theirs)} on rank {r}")
    return gather_ints(list(lengths), group, device) if lengths else [[]] * len(headers)


def _text(number):
    return str(int(number)) if float(number).is_integer() else repr(number)
