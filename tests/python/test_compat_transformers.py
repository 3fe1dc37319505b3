"""Transformers' own FlashAttention path (attn_implementation="flash_attention_2" and
"flash_attention_3", modeling_flash_attention_utils) over the compat packages, unchanged:
the packages pass the distribution checks Transformers makes, and its calls (flash_fn,
flash_varlen_fn, bert_padding) reach flashattn with every argument it sends.

The models run on the CPU in fp32 (flashattn's CPU backend), checked tightly against eager
attention. Transformers offers FlashAttention only where CUDA is, so on a machine without a
GPU the tests tell it CUDA is there (its availability checks and device list, nothing else);
on a GPU machine nothing is patched. The bf16 GPU runs of the same path are in
tests/python/test_hf_acceptance.py. Skips where torch, Transformers or the compat packages
are missing (see test_compat.py).
"""
import copy
import importlib
import importlib.metadata
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
fa_utils = pytest.importorskip("transformers.modeling_flash_attention_utils")

import flashattn  # noqa: E402
from conftest import count_torch_forwards  # noqa: E402

REQUIRED = os.environ.get("FLASHATTN_COMPAT_REQUIRED") == "1"
IMPLEMENTATIONS = {"flash_attention_2": ("flash_attn", "flash-attn", 2),
                   "flash_attention_3": ("flash_attn_interface", "flash-attn-3", 3)}

for _module, _distribution, _ in IMPLEMENTATIONS.values():
    try:
        importlib.import_module(_module)
        _version = importlib.metadata.version(_distribution)
    except ImportError:
        if REQUIRED:
            raise
        pytest.skip(f"{_module} (compat/) is not installed", allow_module_level=True)
    if "+flashattn." not in _version:
        pytest.skip(f"{_module} is not flashattn's", allow_module_level=True)

MATRIX = fa_utils.FLASH_ATTENTION_COMPATIBILITY_MATRIX


def test_transformers_recognizes_the_packages():
    """The checks Transformers makes before it imports flash_attn / flash_attn_interface:
    the distribution owning the module, and flash-attn's version floor."""
    assert MATRIX[2]["pkg_availability_check"]()
    assert MATRIX[3]["pkg_availability_check"]()
    from transformers.utils import import_utils
    assert import_utils.is_flash_attn_greater_or_equal("2.3.3")
    if torch.cuda.is_available():
        assert MATRIX[2]["general_availability_check"]()
        assert MATRIX[3]["general_availability_check"]()


@pytest.fixture
def flash_attention_here(monkeypatch):
    """Transformers' FlashAttention availability as on a CUDA machine when there is none (on
    a GPU machine it is there, and a model on the CPU only gets a warning). Returns the
    count of flashattn forward calls (dense, varlen) made during the test."""
    if not torch.cuda.is_available():
        here = lambda *args, **kwargs: True  # noqa: E731
        for name in ("is_flash_attn_2_available", "is_flash_attn_3_available"):
            monkeypatch.setattr(fa_utils, name, here)
        for version in (2, 3):
            monkeypatch.setitem(MATRIX[version], "general_availability_check", here)
            monkeypatch.setitem(MATRIX[version], "supported_devices", ((here, "cpu"),))
    monkeypatch.setattr(fa_utils, "_loaded_implementation", None)  # import afresh
    return count_torch_forwards(monkeypatch)


def _llama(**extra):
    return transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, max_position_embeddings=64, **extra)


def _pair(config, implementation, auto=None):
    """The same weights under `implementation` and under eager attention, each model from
    its own copy of the config (Transformers sets the implementation on the config object a
    model was built from, which a shared config would switch back to eager)."""
    auto = auto or transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    ours = auto.from_config(copy.deepcopy(config), attn_implementation=implementation)
    eager = auto.from_config(copy.deepcopy(config), attn_implementation="eager")
    assert ours.config._attn_implementation == implementation
    eager.load_state_dict(ours.state_dict())
    return ours.eval(), eager.eval()


def _assert_close(actual, expected):
    torch.testing.assert_close(actual, expected, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_padded_batch_through_the_varlen_function(flash_attention_here, implementation,
                                                  padding_side):
    ours, eager = _pair(_llama(), implementation)
    ids = torch.randint(0, 97, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, :4] = 0 if padding_side == "left" else 1
    mask[1, 7:] = 0 if padding_side == "right" else 1
    mask[2, 0 if padding_side == "left" else 10] = 0
    with torch.no_grad():
        actual = ours(ids, attention_mask=mask).logits[mask.bool()]
        expected = eager(ids, attention_mask=mask).logits[mask.bool()]
    _assert_close(actual, expected)
    assert flash_attention_here["varlen"] == 2  # one call per layer


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_sliding_window_and_softcap(flash_attention_here, implementation):
    mistral = transformers.MistralConfig(vocab_size=97, hidden_size=64, intermediate_size=96,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, sliding_window=4,
                                         max_position_embeddings=64)
    gemma2 = transformers.Gemma2Config(vocab_size=97, hidden_size=64, intermediate_size=96,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=16, sliding_window=4,
                                       attn_logit_softcapping=5.0, max_position_embeddings=64)
    for config in (mistral, gemma2):
        ours, eager = _pair(config, implementation)
        ids = torch.randint(0, 97, (2, 13))
        with torch.no_grad():
            _assert_close(ours(ids).logits, eager(ids).logits)
    assert flash_attention_here["dense"] == 4


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_generate_with_padding(flash_attention_here, implementation):
    ours, eager = _pair(_llama(), implementation)
    ids = torch.randint(1, 97, (2, 7))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # generation pads on the left
    settings = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0,
                    output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        mine, theirs = ours.generate(ids, **settings), eager.generate(ids, **settings)
    assert torch.equal(mine.sequences, theirs.sequences)
    _assert_close(torch.stack(mine.logits), torch.stack(theirs.logits))
    assert flash_attention_here["varlen"] >= 2 * 6


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
def test_padding_free_training_with_the_flattening_collator(flash_attention_here,
                                                            implementation):
    """DataCollatorWithFlattening packs examples into one row with restarting position_ids
    (and, on request, cu_seq_lens): the varlen function, the gradients of separate runs."""
    ours, eager = _pair(_llama(), implementation)
    ours.train()
    lengths = [5, 9, 3]
    examples = [{"input_ids": torch.randint(0, 97, (n,)).tolist()} for n in lengths]
    for flash_kwargs in (False, True):
        collator = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=flash_kwargs)
        batch = collator(examples)
        ours.zero_grad()
        ours(**batch).loss.backward()
        separate = []
        eager.zero_grad()
        for example in examples:
            ids = torch.tensor([example["input_ids"]])
            separate.append(eager(ids, labels=ids).loss * (ids.shape[1] - 1))
        (sum(separate) / sum(n - 1 for n in lengths)).backward()
        for (name, a), (_, b) in zip(ours.named_parameters(), eager.named_parameters()):
            torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-3, msg=name)
    assert flash_attention_here["varlen"] >= 2 * 2
    assert flash_attention_here["dense"] == 0


def test_bert_encoder(flash_attention_here):
    config = transformers.BertConfig(vocab_size=97, hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=96,
                                     max_position_embeddings=64, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    ours, eager = _pair(config, "flash_attention_2", transformers.AutoModelForMaskedLM)
    ids = torch.randint(0, 97, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        _assert_close(ours(ids, attention_mask=mask).logits[mask.bool()],
                      eager(ids, attention_mask=mask).logits[mask.bool()])
    assert flash_attention_here["varlen"] == 2
