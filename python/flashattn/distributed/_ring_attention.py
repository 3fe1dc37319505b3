"""Ring attention with autograd: K/V blocks travel the ring, partial results merge
through their lse; in the backward dK/dV travel with their blocks back to their owner.

Works on packed tensors (q [rows, heads, d], k/v [rows_k, heads_k, d]); ring.py turns
dense calls into packed ones. The plan (which library calls each step makes) is computed
once, from every rank's geometry, and serves both directions.

Memory: each sum has one fp32 copy, the library writes its per-call results into buffers
allocated once, and only what is in flight is double-buffered (the K/V block arriving,
the dK/dV sums arriving). On long sequences the ring runs once per group of KV heads, so
that all of these buffers are the size of one group.
"""
import torch

from . import _block_calls
from ._exchange import wait
from ._merge import merge_into

_KV_TAG, _DKV_TAG = 0, 2

# The ring's sums (the running output, dQ, and the dK/dV sums that travel the ring) stay in
# fp32 for 16-bit inputs: summed in the inputs' dtype, every merge and every hop would round
# once more, and at 4 ranks dV drifted past the tests' tolerance (bench/RESULTS.md).
SUM_DTYPE = torch.float32

# The smallest pass over a group of heads, in (query row, head) pairs: more passes hold
# less at a time, but each pass's calls must stay large enough to fill the device.
MIN_ROW_HEADS_PER_PASS = 1 << 19


class RingPlan:
    """Everything of a ring call but the tensors: the ring, the device calls per step
    (steps[s]: attending to the keys of ring.source(s)) and the options."""

    def __init__(self, ring, steps, rows, softmax_scale, softcap, deterministic):
        self.ring = ring
        self.steps = steps
        self.rows = rows  # every rank's packed row count (contiguous shards may be uneven)
        self.softmax_scale = softmax_scale
        self.softcap = softcap
        self.deterministic = deterministic

    def for_heads(self, heads):
        """The plan of a pass over the query heads `heads` (a slice) alone."""
        steps = [[call.for_heads(heads) for call in calls] for calls in self.steps]
        return RingPlan(self.ring, steps, self.rows, self.softmax_scale, self.softcap,
                        self.deterministic)


def pass_count(rows, heads, heads_k):
    """How many groups of KV heads the ring runs one at a time, for ranks of `rows` rows."""
    return max(g for g in range(1, heads_k + 1)
               if heads_k % g == 0 and (g == 1 or rows * heads >= g * MIN_ROW_HEADS_PER_PASS))


def head_passes(plan, heads, heads_k):
    """[(query heads, KV heads, plan)]: the ring runs once per group of KV heads (with
    their query heads), as many groups as divide heads_k while each keeps at least
    MIN_ROW_HEADS_PER_PASS (query row, head) pairs of an average rank. Every buffer of a
    pass shrinks with the group; the ranks agree since they share rows and heads."""
    count = pass_count(sum(plan.rows) // plan.ring.world, heads, heads_k)
    if count == 1:
        return [(slice(None), slice(None), plan)]
    per_q, per_k = heads // count, heads_k // count
    passes = []
    for i in range(count):
        q_heads = slice(i * per_q, (i + 1) * per_q)
        passes.append((q_heads, slice(i * per_k, (i + 1) * per_k), plan.for_heads(q_heads)))
    return passes


class _Blocks:
    """The K/V block this rank computes with (its own at step 0, then each block as it
    arrives from the previous rank) and the next one, whose transfer runs meanwhile: two
    blocks at most are alive, as long as callers keep no reference of their own."""

    def __init__(self, plan, k, v):
        self.plan, self.k, self.v = plan, k, v
        self._next = self._pending = None

    def start_next(self, step):
        """Starts receiving the block of step + 1 (none after the last step)."""
        ring = self.plan.ring
        if step + 1 < ring.world:
            rows = self.plan.rows[ring.source(step + 1)]
            self._next = [t.new_empty((rows, *t.shape[1:])) for t in (self.k, self.v)]
            self._pending = ring.start((self.k, self.v), self._next, _KV_TAG)

    def advance(self):
        """The block received replaces the current one."""
        if self._pending is not None:
            wait(self._pending)
            (self.k, self.v), self._next, self._pending = self._next, None, None


def _any_block(plan, like, dtype):
    """A buffer that fits any rank's block: the most rows of any rank."""
    return like.new_empty((max(plan.rows), *like.shape[1:]), dtype=dtype)


def _first(buffers, rows):
    return [b[:rows] for b in buffers]


def _ring_forward(q, k, v, plan):
    """(out, lse) of this rank's rows over every block, out in SUM_DTYPE."""
    # The first call's result is the running one; the others go through `part`, one buffer
    # for all of them (the first result's own, once copied to fp32), and merge into it.
    out = lse = part = None
    blocks = _Blocks(plan, k, v)
    for step, calls in enumerate(plan.steps):
        blocks.start_next(step)
        for call in calls:
            if part is None and out is not None:
                part = torch.empty_like(out, dtype=q.dtype)
            result, result_lse = _block_calls.forward(call, q, blocks.k, blocks.v,
                                                      plan.softmax_scale, plan.softcap, out=part)
            if out is None:
                out, lse = result.to(SUM_DTYPE), result_lse
                part = result if out is not result else None
            else:
                merge_into(out, lse, result, result_lse)
        blocks.advance()
    if out is None:  # no row of this rank sees any key
        out = q.new_zeros((*q.shape[:-1], v.shape[-1]), dtype=SUM_DTYPE)
        lse = q.new_full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32)
    return out, lse


def _ring_backward(dout, q, k, v, out, lse, plan):
    """(dq, dk, dv) sums in SUM_DTYPE; dk and dv have the most rows of any rank,
    this rank's own first."""
    ring = plan.ring
    dq = torch.zeros(q.shape, dtype=SUM_DTYPE, device=q.device)
    # What one library call writes, reused by every call (dK/dV sized for any block).
    parts = None
    # The dK/dV sums of the block held now, and a second pair of buffers: while this rank
    # adds to the first and sends it on, the second receives the next block's sums.
    held_pair = free_pair = None
    dkv_pending = None
    blocks = _Blocks(plan, k, v)
    for step, calls in enumerate(plan.steps):
        blocks.start_next(step)
        rows = blocks.k.shape[0]
        arrived = step == 0  # the first block is this rank's own: no sums to receive
        for call in calls:
            if parts is None:
                parts = [torch.empty_like(q), _any_block(plan, k, k.dtype),
                         _any_block(plan, v, v.dtype)]
            dq_c, dk_c, dv_c = _block_calls.backward(
                call, dout, q, blocks.k, blocks.v, out, lse, plan.softmax_scale, plan.softcap,
                plan.deterministic, grads=(parts[0], *_first(parts[1:], rows)))
            dq.add_(dq_c)
            # The previous rank's sums arrive while this rank computes its first part.
            if not arrived:
                wait(dkv_pending)
                dkv_pending, arrived = None, True
            if held_pair is None:
                held_pair = [_any_block(plan, x, SUM_DTYPE) for x in (k, v)]
                for total, mine in zip(_first(held_pair, rows), (dk_c, dv_c)):
                    total.copy_(mine)
            else:
                for total, mine in zip(_first(held_pair, rows), (dk_c, dv_c)):
                    total.add_(mine)
        if not arrived:  # no row of this rank sees the block: its sums go on as they came
            wait(dkv_pending)
            dkv_pending = None
        if held_pair is None:  # (step 0 only) no row of this rank sees its own keys
            held_pair = [_any_block(plan, x, SUM_DTYPE).zero_() for x in (k, v)]
        if ring.world > 1:
            # The sums sent at the last step have left (the wait above), so their buffers
            # receive the next block's; after the last step this hop takes each block home.
            if free_pair is None:
                free_pair = [_any_block(plan, x, SUM_DTYPE) for x in (k, v)]
            receive_rows = plan.rows[ring.source(step + 1)]
            dkv_pending = ring.start(_first(held_pair, rows), _first(free_pair, receive_rows),
                                     _DKV_TAG)
            held_pair, free_pair = free_pair, held_pair
        blocks.advance()
    wait(dkv_pending)
    return dq, held_pair[0], held_pair[1]


def _gradient(total, rows, dtype):
    """The first `rows` of a block's sum as a tensor of its own in `dtype` (a view would
    keep a larger buffer alive with it)."""
    if total.dtype != dtype:
        return total[:rows].to(dtype)
    return total if total.shape[0] == rows else total[:rows].clone()


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan):
        passes = head_passes(plan, q.shape[1], k.shape[1])
        if len(passes) == 1:
            k, v = k.contiguous(), v.contiguous()  # they are sent as they are
            out, lse = _ring_forward(q, k, v, plan)
            out = out.to(q.dtype)
        else:
            out = q.new_empty((*q.shape[:-1], v.shape[-1]))
            lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
            for q_heads, kv_heads, pass_plan in passes:
                out[:, q_heads], lse[q_heads] = _ring_forward(
                    q[:, q_heads], k[:, kv_heads].contiguous(), v[:, kv_heads].contiguous(),
                    pass_plan)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.passes = passes
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        if grad_out is None:
            return None, None, None, None
        dout = grad_out.contiguous()
        if len(ctx.passes) == 1:
            dq, dk, dv = _ring_backward(dout, q, k, v, out, lse, ctx.passes[0][2])
            dq = dq.to(q.dtype)
            dk = _gradient(dk, k.shape[0], k.dtype)
            return dq, dk, _gradient(dv, v.shape[0], v.dtype), None
        # Several passes: each adds its heads' gradients to these, its sums then freed.
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        rows_k = k.shape[0]
        for q_heads, kv_heads, pass_plan in ctx.passes:
            sums = _ring_backward(dout[:, q_heads], q[:, q_heads], k[:, kv_heads].contiguous(),
                                  v[:, kv_heads].contiguous(), out[:, q_heads], lse[q_heads],
                                  pass_plan)
            dq[:, q_heads] = sums[0]
            dk[:, kv_heads] = sums[1][:rows_k]
            dv[:, kv_heads] = sums[2][:rows_k]
            del sums
        return dq, dk, dv, None
