"""Point-to-point traffic around the ring: every rank sends to rank+1 and receives from
rank-1 of its process group, with torch.distributed's batch_isend_irecv.

The ops are asynchronous: with NCCL they run on NCCL's own stream, which waits for the
tensors' producers and leaves the current (compute) stream free, so the next block's
transfer overlaps the current block's attention; with gloo they run on gloo's threads.
`wait()` makes the current stream (or thread) wait for them. Every rank posts the same
sequence of ops, which is what keeps the pairs matched.
"""
import torch.distributed as dist


class Ring:
    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.world)
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.world)

    def source(self, step):
        """The rank whose keys this rank holds at `step` of the ring."""
        return (self.rank - step) % self.world

    def start(self, send, receive, tag):
        """Sends `send` to the next rank and receives `receive` (same shapes) from the
        previous one; returns the pending requests. Tags tell the K/V traffic from the
        dK/dV traffic apart on backends that match by tag (gloo)."""
        ops = [dist.P2POp(dist.isend, t, self.next, self.group, tag + i)
               for i, t in enumerate(send)]
        ops += [dist.P2POp(dist.irecv, t, self.prev, self.group, tag + i)
                for i, t in enumerate(receive)]
        return dist.batch_isend_irecv(ops)


def wait(requests):
    for request in requests or ():
        request.wait()
