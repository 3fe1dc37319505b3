"""Ring attention with autograd: K/V blocks travel the ring, partial results merge
through their lse; in the backward dK/dV travel with their blocks back to their owner.

Works on packed tensors (q [rows, heads, d], k/v [rows_k, heads_k, d]); ring.py turns
dense calls into packed ones. The plan (which library calls each step makes) is computed
once, from every rank's geometry, and serves both directions.
"""
import torch

from . import _block_calls
from ._exchange import wait
from ._merge import merge_into

_KV_TAG, _DKV_TAG = 0, 2


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


def _block_of(plan, step, *like):
    """Buffers for the block of the rank the ring brings at `step`: its rows, the rest of
    `like`'s shape and dtype."""
    rows = plan.rows[plan.ring.source(step)]
    return [t.new_empty((rows, *t.shape[1:])) for t in like]


def _received(pending, received, dk, dv):
    """The fp32 dK/dV of the block held now: what came from the previous rank (once it
    has arrived) plus this rank's dk, dv; or dk, dv alone at the first step."""
    if pending is None:
        return [dk.float(), dv.float()]
    wait(pending)
    received[0].add_(dk)
    received[1].add_(dv)
    return received


class RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan):
        ring = plan.ring
        k, v = k.contiguous(), v.contiguous()  # they are sent as they are
        out_acc = q.new_zeros((*q.shape[:-1], v.shape[-1]), dtype=torch.float32)
        lse_acc = q.new_full((q.shape[1], q.shape[0]), float("-inf"), dtype=torch.float32)
        k_cur, v_cur = k, v
        for step, calls in enumerate(plan.steps):
            pending = None
            if step + 1 < ring.world:
                k_next, v_next = _block_of(plan, step + 1, k_cur, v_cur)
                pending = ring.start((k_cur, v_cur), (k_next, v_next), _KV_TAG)
            for call in calls:
                out, lse = _block_calls.forward(call, q, k_cur, v_cur, plan.softmax_scale,
                                          plan.softcap)
                merge_into(out_acc, lse_acc, out, lse)
            if pending is not None:
                wait(pending)
                k_cur, v_cur = k_next, v_next
        out = out_acc.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse_acc)
        ctx.plan = plan
        ctx.mark_non_differentiable(lse_acc)
        ctx.set_materialize_grads(False)
        return out, lse_acc

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        plan, ring = ctx.plan, ctx.plan.ring
        if grad_out is None:
            return None, None, None, None
        dout = grad_out.contiguous()
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        k_cur, v_cur = k, v
        dkv_pending = dkv_in = dkv_out = None
        for step, calls in enumerate(plan.steps):
            kv_pending = None
            if step + 1 < ring.world:
                k_next, v_next = _block_of(plan, step + 1, k_cur, v_cur)
                kv_pending = ring.start((k_cur, v_cur), (k_next, v_next), _KV_TAG)
            # dK/dV of the block held now, in fp32: what the previous ranks added to it
            # arrives while this rank computes its first part, and the sum travels on.
            held = None
            for call in calls:
                dq_c, dk_c, dv_c = _block_calls.backward(call, dout, q, k_cur, v_cur, out, lse,
                                                         plan.softmax_scale, plan.softcap,
                                                         plan.deterministic)
                dq += dq_c
                if held is None:
                    held = _received(dkv_pending, dkv_in, dk_c, dv_c)
                    dkv_pending = None
                else:
                    held[0].add_(dk_c)
                    held[1].add_(dv_c)
            if held is None:  # no row of this rank sees the block: pass it on as it came
                if dkv_pending is None:
                    held = [x.new_zeros(x.shape, dtype=torch.float32) for x in (k_cur, v_cur)]
                else:
                    wait(dkv_pending)
                    held, dkv_pending = dkv_in, None
            if ring.world > 1:
                # After the last step this hop takes each block's gradients home.
                dkv_out = held
                dkv_in = _block_of(plan, step + 1, *held)
                dkv_pending = ring.start(dkv_out, dkv_in, _DKV_TAG)
            else:
                dkv_in = held
            if kv_pending is not None:
                wait(kv_pending)
                k_cur, v_cur = k_next, v_next
        wait(dkv_pending)
        dk, dv = dkv_in
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None
