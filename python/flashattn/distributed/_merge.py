"""The exact merge of partial attention results through their log-sum-exp.

Two partial results over disjoint key sets, (out_a, lse_a) and (out_b, lse_b), combine as
lse = log(exp(lse_a) + exp(lse_b)) and out = out_a * exp(lse_a - lse) + out_b * exp(lse_b
- lse): the softmax-state merge of src/core/softmax_state.hpp, on whole tensors. A row
that saw no key in either part keeps lse = -inf and out = 0 (no NaN from masking alone).
"""
import torch


def merge_into(out_acc, lse_acc, out_part, lse_part):
    """Folds (out_part, lse_part) into the fp32 accumulators in place. out: [rows, heads,
    d]; lse: [heads, rows]."""
    lse_new = torch.logaddexp(lse_acc, lse_part)
    empty = lse_new == float("-inf")
    keep = torch.where(empty, 0.0, torch.exp(lse_acc - lse_new)).t().unsqueeze(-1)
    take = torch.where(empty, 0.0, torch.exp(lse_part - lse_new)).t().unsqueeze(-1)
    out_acc.mul_(keep).addcmul_(out_part, take)  # no fp32 copy of out_part
    lse_acc.copy_(lse_new)
