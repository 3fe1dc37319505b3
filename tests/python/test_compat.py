"""The compatibility packages (compat/: distributions flash-attn and flash-attn-3), on the
numpy path: every name flash-attn 2.8 and FlashAttention-3 users import is there and is
flashattn's, with their signatures; the distribution metadata Transformers reads says
flash-attn >= 2.3.3 owns flash_attn and flash-attn-3 owns flash_attn_interface; FlashAttention's
non-attention modules raise an ImportError saying why.

The packages are installed on purpose (they replace a real flash-attn), so this module
skips where they are absent, unless FLASHATTN_COMPAT_REQUIRED=1 (scripts/test sets it in the
fresh environment where it installs them) turns their absence into a failure.
"""
import importlib
import importlib.metadata
import inspect
import os
import re

import numpy as np
import pytest

import flashattn
import flashattn.bert_padding
import flashattn.fa3
import flashattn.interface
import flashattn.rotary
import reference_attention as ref
from conftest import assert_close, randn


REQUIRED = os.environ.get("FLASHATTN_COMPAT_REQUIRED") == "1"


def _compat_module(name, distribution):
    """The compat package's module `name`; skips (fails when REQUIRED) where it is absent
    or is a real FlashAttention's."""
    try:
        module = importlib.import_module(name)
        version = importlib.metadata.version(distribution)
    except ImportError:  # PackageNotFoundError is an ImportError too
        if REQUIRED:
            raise
        pytest.skip(f"{name} (compat/) is not installed", allow_module_level=True)
    if "+flashattn." not in version:
        assert not REQUIRED, f"{name} is {distribution} {version}, not flashattn's"
        pytest.skip(f"{name} is {distribution} {version}, not flashattn's",
                    allow_module_level=True)
    return module


flash_attn = _compat_module("flash_attn", "flash-attn")
fa3_module = _compat_module("flash_attn_interface", "flash-attn-3")

import flash_attn.bert_padding  # noqa: E402
import flash_attn.flash_attn_interface  # noqa: E402
import flash_attn.layers.rotary  # noqa: E402

FUNCTIONS = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
             "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func",
             "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache"]

# flash-attn 2.8.3's parameters, in order (its flash_attn_interface.py); flashattn may add
# keywords at the end only.
FA2_PARAMETERS = {
    "flash_attn_func": ["q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size",
                        "softcap", "alibi_slopes", "deterministic", "return_attn_probs"],
    "flash_attn_varlen_func": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                               "max_seqlen_k", "dropout_p", "softmax_scale", "causal",
                               "window_size", "softcap", "alibi_slopes", "deterministic",
                               "return_attn_probs", "block_table"],
    "flash_attn_with_kvcache": ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin",
                                "cache_seqlens", "cache_batch_idx", "cache_leftpad",
                                "block_table", "softmax_scale", "causal", "window_size",
                                "softcap", "rotary_interleaved", "alibi_slopes", "num_splits",
                                "return_softmax_lse"],
}

# FlashAttention-3's (hopper/flash_attn_interface.py).
FA3_PARAMETERS = {
    "flash_attn_func": ["q", "k", "v", "softmax_scale", "causal", "qv", "q_descale",
                        "k_descale", "v_descale", "window_size", "attention_chunk", "softcap",
                        "num_splits", "pack_gqa", "deterministic", "sm_margin",
                        "return_attn_probs"],
    "flash_attn_varlen_func": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                               "max_seqlen_k", "seqused_q", "seqused_k", "softmax_scale",
                               "causal", "qv", "q_descale", "k_descale", "v_descale",
                               "window_size", "attention_chunk", "softcap", "num_splits",
                               "pack_gqa", "deterministic", "sm_margin", "return_attn_probs"],
    "flash_attn_with_kvcache": ["q", "k_cache", "v_cache", "k", "v", "qv", "rotary_cos",
                                "rotary_sin", "cache_seqlens", "cache_batch_idx",
                                "cache_leftpad", "page_table", "cu_seqlens_q",
                                "cu_seqlens_k_new", "max_seqlen_q", "rotary_seqlens",
                                "q_descale", "k_descale", "v_descale", "softmax_scale",
                                "causal", "window_size", "attention_chunk", "softcap",
                                "rotary_interleaved", "scheduler_metadata", "num_splits",
                                "pack_gqa", "sm_margin", "return_softmax_lse"],
}


def _parameters(function):
    return list(inspect.signature(function).parameters)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_are_flashattns(name):
    ours = getattr(flashattn.interface, name)
    assert getattr(flash_attn, name) is ours
    assert getattr(flash_attn.flash_attn_interface, name) is ours
    assert name in flash_attn.__all__


@pytest.mark.parametrize("name", list(FA2_PARAMETERS))
def test_fa2_signatures(name):
    expected = FA2_PARAMETERS[name]
    assert _parameters(getattr(flash_attn, name))[:len(expected)] == expected


@pytest.mark.parametrize("name", ["pad_input", "unpad_input", "index_first_axis",
                                  "index_put_first_axis",
                                  "unpad_input_for_concatenated_sequences"])
def test_bert_padding(name):
    assert getattr(flash_attn.bert_padding, name) is getattr(flashattn.bert_padding, name)


@pytest.mark.parametrize("name", ["apply_rotary_emb", "apply_rotary_emb_func",
                                  "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_"])
def test_rotary(name):
    assert getattr(flash_attn.layers.rotary, name) is getattr(flashattn.rotary, name)


def test_rotary_embedding_needs_torch_only_when_asked_for():
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="torch"):
            flash_attn.layers.rotary.RotaryEmbedding
        return
    assert flash_attn.layers.rotary.RotaryEmbedding is flashattn.rotary.RotaryEmbedding


@pytest.mark.parametrize("name", list(FA3_PARAMETERS) + ["flash_attn_qkvpacked_func"])
def test_fa3_module(name):
    assert getattr(fa3_module, name) is getattr(flashattn.fa3, name)
    if name in FA3_PARAMETERS:
        assert _parameters(getattr(fa3_module, name)) == FA3_PARAMETERS[name]


def test_calls_run_the_library(rng):
    q, k, v = randn(rng, (2, 9, 4, 16)), randn(rng, (2, 9, 2, 16)), randn(rng, (2, 9, 2, 16))
    expected, _ = ref.attention(q, k, v, causal=True)
    assert_close(flash_attn.flash_attn_func(q, k, v, causal=True), expected, np.float32)
    assert_close(fa3_module.flash_attn_func(q, k, v, causal=True), expected, np.float32)


def _public_version(text):
    return tuple(int(part) for part in text.split("+")[0].split(".")[:3])


def test_version_and_the_metadata_transformers_reads():
    version = importlib.metadata.version("flash-attn")
    assert flash_attn.__version__ == version
    assert version.endswith("+flashattn." + flashattn.__version__), version
    assert _public_version(version) >= (2, 3, 3)  # Transformers' floor for flash_attention_2
    owners = importlib.metadata.packages_distributions()
    normalized = lambda names: [n.replace("_", "-").lower() for n in names]
    # Transformers takes flash_attn for FlashAttention-2 only when a distribution named
    # flash-attn owns it, and flash_attn_interface for FlashAttention-3 only when
    # flash-attn-3 does.
    assert "flash-attn" in normalized(owners.get("flash_attn", []))
    assert "flash-attn-3" in normalized(owners.get("flash_attn_interface", []))
    fa3_version = importlib.metadata.version("flash-attn-3")
    assert fa3_version.endswith("+flashattn." + flashattn.__version__), fa3_version


@pytest.mark.parametrize("module", ["flash_attn.ops.layer_norm", "flash_attn.ops.rms_norm",
                                    "flash_attn.ops.fused_dense", "flash_attn.ops.triton.rotary",
                                    "flash_attn.losses.cross_entropy", "flash_attn.modules.mha",
                                    "flash_attn.models.gpt", "flash_attn.flash_attn_triton"])
def test_non_attention_modules_say_why_they_are_absent(module):
    with pytest.raises(ImportError, match=re.escape("provides attention only")):
        importlib.import_module(module)


def test_fa2_dropout_layout_helper_is_refused():
    with pytest.raises(NotImplementedError, match="S_dmask"):
        flash_attn.flash_attn_interface._get_block_size_n("cuda", 64, True, False)
