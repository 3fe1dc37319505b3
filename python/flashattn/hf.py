"""Hugging Face Transformers integration: flashattn as an attention implementation.

    import flashattn.hf
    flashattn.hf.register()
    model = AutoModelForCausalLM.from_config(config, attn_implementation="fa2cpp")

The name is "fa2cpp" because Transformers routes every implementation whose name contains
"flash" to its own flash-attn loader. Like FlashAttention-2 in Transformers, padded
batches are unpadded to the packed (varlen) layout and padded back, packed sequences are
read from cu_seq_lens_* or position_ids, and sliding windows and softcapping map to the
kernel's options. CUDA tensors run the CUDA kernels, CPU tensors the CPU backend.

Under torch.compile a padded pass over a cache (generation) is attended without host reads
or data-dependent shapes, so fullgraph=True works, provided the padding is on the left, as
Transformers' generate() pads; a batch padded otherwise would be attended wrongly there. A
padded pass without a cache (training, the prefill of a dynamic cache) is still unpadded,
which has data-dependent shapes: it needs fullgraph=False (graph breaks).
"""
import os
import weakref

import torch

from . import interface
from ._calls import Options
from .bert_padding import pad_input, unpad_input

NAME = "fa2cpp"

__all__ = ["NAME", "register", "attention_forward", "padding_mask"]


def register(name=NAME):
    """Registers the attention function and its mask function under `name`; returns it."""
    if "flash" in name:
        raise ValueError(f"name: Transformers rejects registered names containing 'flash', "
                         f"got {name!r}")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, padding_mask)
    return name


def padding_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                 attention_mask=None, **kwargs):
    """The mask attention_forward takes: the 2D padding mask [batch, kv_length] (True where
    there is a token), or None without padding. Causality, windows and packing are kernel
    options, so no dense mask is ever built.

    A static cache hands every layer all kv_length slots, of which only the first
    q_offset + q_length hold keys yet, and without padding Transformers passes no mask. The
    slots past them must still be left out, so then the mask is the 1D int32 count of keys
    seen per batch entry (_seen_keys), and attention_forward attends to that prefix of the
    cache.

    Generation over a static cache makes its masks ahead of a forward that Transformers may
    compile, so a decoding step's mask covers all kv_length slots (False past the tokens
    seen): its shape is then the same at every step, and the compiled step keeps static
    shapes. Under torch.compile a 2D mask of a pass with a cache is returned without reading
    whether it has padding (a data-dependent branch): attention_forward attends it on the
    device (_attend_left_padded)."""
    if attention_mask is None:
        return _seen_keys(batch_size, q_length, kv_length, q_offset, kv_offset)
    if attention_mask.dim() == 1:  # already ours: generate() makes the masks ahead of forward
        if torch.compiler.is_compiling():
            # Counted again on the device: the count made ahead is a host tensor, and a host
            # tensor among a graph's inputs keeps inductor from using CUDA graphs.
            return _seen_keys(batch_size, q_length, kv_length, q_offset, kv_offset)
        return attention_mask
    attention_mask = attention_mask[:, -kv_length:]
    if _static_decoding(q_length, q_offset, kv_offset):
        missing = kv_length - attention_mask.shape[1]
        return torch.nn.functional.pad(attention_mask, (0, missing)) if missing else attention_mask
    if torch.compiler.is_compiling() and _with_cache(q_length, kv_length, attention_mask):
        return attention_mask
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


def _static_decoding(q_length, q_offset, kv_offset):
    """One query per sequence over a static cache's first slots: the static cache gives its
    position as a tensor (Transformers' choice, to compile without graph breaks)."""
    return (q_length == 1 and isinstance(q_offset, torch.Tensor)
            and not isinstance(kv_offset, torch.Tensor) and kv_offset == 0)


def _with_cache(q_length, kv_length, mask):
    """Whether a pass with a 2D padding mask reads a cache: its queries are not all of the
    mask's positions, or its keys are a static cache longer than the mask. Otherwise (a
    training pass, or a prefill into an empty dynamic cache) queries and keys are the same
    tokens, padded on either side."""
    return not q_length == kv_length == mask.shape[1]


def _seen_keys(batch_size, q_length, kv_length, q_offset, kv_offset):
    """[batch] int32: how many of the cache's kv_length slots hold keys, or None where all
    do. Under torch.compile the count stays a device tensor (the cache position is one), so
    no shape depends on it; otherwise it is read once per pass and kept on the host."""
    if isinstance(kv_offset, torch.Tensor) or kv_offset != 0:
        return None  # a sliding cache's window: its slots are Transformers' to order
    if kv_length <= q_length:
        return None  # no slot past the queries' own keys: nothing to read from the device
    if isinstance(q_offset, torch.Tensor) and torch.compiler.is_compiling():
        return (q_offset + q_length).to(torch.int32).reshape(1).expand(batch_size)
    seen = int(q_offset) + q_length
    if seen >= kv_length:
        return None
    return torch.full((batch_size,), seen, dtype=torch.int32)


def _attend_prefix(q, k, v, seen, options, deterministic):
    """Queries against the first seen[b] keys of each batch entry's cache (_seen_keys)."""
    if not torch.compiler.is_compiling():
        count = int(seen[0])  # a host tensor: the same count for every entry
        return interface._attention(q, k[:, :count], v[:, :count], None, options,
                                    deterministic, False)
    # Compiled: the cache as varlen rows, each entry's keys cut by seqused_k on the device.
    batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
    q_rows = _rows(q)
    starts = torch.arange(batch + 1, dtype=torch.int32, device=q.device)
    varlen = interface._varlen(q_rows, starts * seqlen_q, starts * seqlen_k, seqlen_q, seqlen_k,
                               seen.to(q.device))
    out = interface._attention(q_rows, _rows(k), _rows(v), varlen, options, deterministic, False)
    return out.view(batch, seqlen_q, *out.shape[1:])


def _attend_left_padded(q, k, v, mask, options, deterministic):
    """Compiled generation with a padding mask over the cache's first slots: L tokens seen
    (the mask may go on past them, False), the queries the last seqlen_q of them, and
    generation pads on the left, so entry b's keys are the last count_b of its L slots.
    Unpadding would make shapes depend on the mask; instead the cache stays in place as
    varlen rows and offsets computed on the device cut out each entry's keys. The library
    wants offsets from 0 to the last row, so the slots between entries (left pads, slots past
    L) are sequences of their own, without queries. Causal masking aligns each entry's
    queries with its last keys: a query sees the keys up to its own position, windows
    included, and a pad query (prefill) sees none and gives 0, as unpadding does.
    A mask that is not left padding (holes, right padding) would be attended wrongly here;
    Transformers does not generate with right padding."""
    batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
    counts = mask.sum(dim=1, dtype=torch.int32).to(q.device)
    positions = torch.arange(1, mask.shape[1] + 1, dtype=torch.int32, device=mask.device)
    seen = (mask * positions).amax().to(q.device)  # one past the last column holding a token
    ends = torch.arange(batch, dtype=torch.int32, device=q.device) * seqlen_k + seen
    # Offsets of 2 * batch + 1 sequences: a leading gap, then each entry and the gap after it.
    inner = torch.stack([ends - counts, ends], dim=1).reshape(-1)
    cu_k = torch.cat([inner.new_zeros(1), inner, inner.new_full((1,), batch * seqlen_k)])
    cu_q = torch.arange(2 * batch + 2, dtype=torch.int32, device=q.device) // 2 * seqlen_q
    q_rows = _rows(q)
    varlen = interface._varlen(q_rows, cu_q, cu_k, seqlen_q, seqlen_k)
    out = interface._attention(q_rows, _rows(k), _rows(v), varlen, options, deterministic, False)
    return out.view(batch, seqlen_q, *out.shape[1:])


def _kernel_dtype(query):
    """The CUDA kernels take fp16/bf16: an fp32 model runs them in autocast's dtype (or
    bf16) and gets fp32 back; the CPU backend takes fp32 as it is."""
    if query.dtype != torch.float32 or not query.is_cuda:
        return None
    if torch.is_autocast_enabled("cuda"):
        return torch.get_autocast_dtype("cuda")
    return torch.bfloat16


class _OncePerPass:
    """The last value derived from a tensor, kept while the same tensor (the same object with
    the same version counter) comes back with the same key. Every layer of a forward pass gets
    the same padding mask and position_ids, and deriving token positions from them reads the
    device (a synchronization), so it happens once per pass. Under torch.compile nothing is
    kept."""

    def __init__(self):
        self._last = None

    def get(self, tensor, key, derive):
        if torch.compiler.is_compiling() or tensor.is_inference():
            return derive()  # inference tensors have no version counter to tell a rewrite
        last = self._last
        if (last is not None and last[0]() is tensor and last[1] == tensor._version
                and last[2] == key):
            return last[3]
        value = derive()
        self._last = (weakref.ref(tensor), tensor._version, key, value)
        return value


_unpadding = _OncePerPass()
_packing = _OncePerPass()


def _rows(x):
    """[batch, seqlen, ...] as the packed rows [batch * seqlen, ...]."""
    return x.reshape(-1, *x.shape[2:])


def _token_layout(rows_like, mask):
    """(indices into batch x seqlen, cu_seqlens, longest) of the tokens of a padding mask."""
    return unpad_input(rows_like, mask)[1:4]


def _unpadded(q, k, v, mask, options, deterministic):
    """Padded batch: keep the tokens, attend in the packed layout, scatter back."""
    batch, seqlen_q = q.shape[:2]
    if k.shape[1] > mask.shape[1]:  # a static cache longer than the tokens seen
        k, v = k[:, :mask.shape[1]], v[:, :mask.shape[1]]
    indices_k, cu_k, max_k = _unpadding.get(mask, ("k", k.shape[1]),
                                            lambda: _token_layout(k, mask))
    k_rows, v_rows = _rows(k)[indices_k], _rows(v)[indices_k]
    if seqlen_q == k.shape[1]:
        q_rows = _rows(q)[indices_k]
        indices_q, cu_q, max_q = indices_k, cu_k, max_k
    elif seqlen_q == 1:  # decoding: one query per sequence
        cu_q = torch.arange(batch + 1, dtype=torch.int32, device=q.device)
        q_rows, indices_q, max_q = q.squeeze(1), cu_q[:-1], 1
    else:  # queries are the last seqlen_q positions (left padding)
        indices_q, cu_q, max_q = _unpadding.get(
            mask, ("q", k.shape[1], seqlen_q), lambda: _token_layout(q, mask[:, -seqlen_q:]))
        q_rows = _rows(q)[indices_q]
    varlen = interface._varlen(q_rows, cu_q, cu_k, max_q, max_k)
    out = interface._attention(q_rows, k_rows, v_rows, varlen, options, deterministic, False)
    return pad_input(out, indices_q, batch, seqlen_q)


def _packed_offsets(position_ids, kwargs):
    """(cu_q, cu_k, max_q, max_k) of sequences packed in one row, or None if not packed."""
    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None:
        max_q, max_k = kwargs.get("max_length_q"), kwargs.get("max_length_k")
        longest = lambda cu: int((cu[1:] - cu[:-1]).max())
        return (cu_q, cu_k, longest(cu_q) if max_q is None else int(max_q),
                longest(cu_k) if max_k is None else int(max_k))
    if position_ids is None or position_ids.shape[0] != 1:
        return None
    return _packing.get(position_ids, None, lambda: _find_packing(position_ids))


def _find_packing(position_ids):
    positions = position_ids.reshape(-1)
    starts = torch.nonzero(positions == positions.min()).reshape(-1)
    if starts.numel() <= 1:
        return None
    total = torch.tensor([positions.numel()], device=positions.device)
    cu = torch.cat([starts, total]).to(torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    return cu, cu, longest, longest


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      sliding_window=None, softcap=None, is_causal=None, **kwargs):
    """Transformers' attention-function signature: query [b, h, s, d], key/value
    [b, h_kv, s_kv, d] -> (output [b, s, h, d], None)."""
    # Every layer of every decoding step comes here: the body stays lean (no generator, no
    # keyword dict, flash_attn_func's argument parsing skipped for interface._attention).
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError("fa2cpp: attention sinks (s_aux) are not supported")
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    kernel_dtype = _kernel_dtype(q)
    out_dtype = q.dtype
    if kernel_dtype is not None:
        q, k, v = q.to(kernel_dtype), k.to(kernel_dtype), v.to(kernel_dtype)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    deterministic = kwargs.get("deterministic")
    if deterministic is None:
        deterministic = os.environ.get("FLASH_ATTENTION_DETERMINISTIC", "0") == "1"
    # `sliding_window` tokens, the current one included; causal takes no right window.
    if sliding_window is None:
        window = (-1, 0) if causal else (-1, -1)
    else:
        window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    options = Options(scaling, causal, window, softcap or 0.0, None, dropout)

    packed = None
    if attention_mask is None and q.shape[1] == k.shape[1]:
        packed = _packed_offsets(kwargs.get("position_ids"), kwargs)
    if attention_mask is not None and attention_mask.dim() == 1:  # a static cache's prefix
        out = _attend_prefix(q, k, v, attention_mask, options, deterministic)
    elif attention_mask is not None:
        if torch.compiler.is_compiling() and _with_cache(q.shape[1], k.shape[1], attention_mask):
            out = _attend_left_padded(q, k, v, attention_mask, options, deterministic)
        else:  # eagerly, unpadding reads the mask once per pass and attends only the tokens
            out = _unpadded(q, k, v, attention_mask, options, deterministic)
    elif packed is not None:
        varlen = interface._varlen(q, *packed)
        out = interface._attention(_rows(q), _rows(k), _rows(v), varlen, options, deterministic,
                                   False)
        out = out.view(q.shape[0], -1, *out.shape[1:])
    else:
        out = interface._attention(q, k, v, None, options, deterministic, False)
    if out.dtype != out_dtype:
        out = out.to(out_dtype)
    return out, None
