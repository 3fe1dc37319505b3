"""Acceptance of flashattn in Transformers on the GPU, in bf16: through flashattn.hf
("fa2cpp") and, where the compat packages are installed (compat/), through Transformers' own
attn_implementation="flash_attention_2" and "flash_attention_3", unchanged. Small randomly
initialized models built from configs (nothing downloaded), one per attention pattern, each
with the same weights under ours, sdpa and eager. The reference is attn_implementation="sdpa";
the bound is set on the same inputs by how far "eager" lands from it: ours may differ by
at most twice that (logits of the non-padded tokens, a training step's gradients,
generate()'s step-by-step logits). Gemma2's softcap is implemented by eager alone (SDPA
has no softcap), so there eager is the reference and sdpa the baseline.

Every test counts the calls that reached flashattn's functions, and one profiles a training
step to see flashattn's kernels, and no other attention kernel, run.

The numbers are printed (pytest -s) and, with FLASHATTN_HF_REPORT=PATH, appended to PATH
as JSON lines. Skips without a GPU.
"""
import copy
import importlib.metadata
import json
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import flashattn  # noqa: E402
from conftest import count_torch_forwards  # noqa: E402
import flashattn.hf  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and flashattn.cuda_available()),
    reason="needs a GPU and a flashattn build with CUDA")

FA2CPP = flashattn.hf.register()


def _dropin_installed(distribution):
    """Whether compat/'s `distribution` is installed (not a real FlashAttention's)."""
    try:
        return "+flashattn." in importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False


# Transformers' own names, when the compat packages serve them.
DROPINS = ([name for name, distribution in (("flash_attention_2", "flash-attn"),
                                             ("flash_attention_3", "flash-attn-3"))
            if _dropin_installed(distribution)])
IMPLEMENTATIONS = [FA2CPP] + DROPINS
VOCAB = 512
SEQLEN = 128
DTYPE = torch.bfloat16
# Below this the comparison is at bf16 rounding level, whatever eager does (a floor, so
# that a baseline that happens to agree exactly does not demand exactness from us).
FLOOR = 2e-3


def _decoder_sizes(**extra):
    return dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512,
                max_position_embeddings=512, **extra)


CONFIGS = {
    "llama-mha": lambda: transformers.LlamaConfig(
        **_decoder_sizes(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4)),
    "qwen2-gqa": lambda: transformers.Qwen2Config(
        **_decoder_sizes(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2)),
    # Alternating sliding (32 tokens) and global layers with attention softcapping;
    # initializer_range is raised so the scores reach the softcap's curved part.
    "gemma2-softcap-window": lambda: transformers.Gemma2Config(
        **_decoder_sizes(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=64, sliding_window=32, attn_logit_softcapping=20.0,
                         query_pre_attn_scalar=64, initializer_range=0.1)),
    "bert-encoder": lambda: transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=512, max_position_embeddings=512, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0),
}
DECODERS = [name for name in CONFIGS if name != "bert-encoder"]


def _reference_and_baseline(name):
    return ("eager", "sdpa") if name.startswith("gemma2") else ("sdpa", "eager")


def _models(name, ours):
    """{implementation: model} with identical weights for `ours`, sdpa and eager, each from
    its own config copy (Transformers keeps a reference to the config object it was built
    from)."""
    config = CONFIGS[name]()
    auto = (transformers.AutoModelForMaskedLM if name == "bert-encoder"
            else transformers.AutoModelForCausalLM)
    torch.manual_seed(0)
    models = {}
    for implementation in (ours, "sdpa", "eager"):
        model = auto.from_config(copy.deepcopy(config), attn_implementation=implementation)
        if models:
            model.load_state_dict(next(iter(models.values())).state_dict())
        models[implementation] = model.to("cuda", DTYPE).eval()
        assert model.config._attn_implementation == implementation
    return models


def _batch(padding_side, batch=4):
    """Token ids [batch, SEQLEN] and their mask: row 0 full, the others padded."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (batch, SEQLEN), generator=generator)
    mask = torch.ones_like(ids)
    for row, length in enumerate([SEQLEN, 97, 64, 5][:batch]):
        pad = slice(length, None) if padding_side == "right" else slice(None, SEQLEN - length)
        mask[row, pad] = 0
    return ids.cuda(), mask.cuda()


def _relative(actual, expected, scale):
    return ((actual.float() - expected.float()).abs().max() / scale).item()


def _record(name, what, values):
    line = {"model": name, "check": what, **values}
    print(json.dumps(line))
    path = os.environ.get("FLASHATTN_HF_REPORT")
    if path:
        with open(path, "a") as report:
            report.write(json.dumps(line) + "\n")


def _assert_within_bound(name, implementation, what, ours, baseline, **extra):
    bound = max(2 * baseline, FLOOR)
    _record(name, what, {"implementation": implementation, "ours": ours, "baseline": baseline,
                         "bound": bound, **extra})
    assert ours <= bound, (f"{name} {implementation} {what}: ours {ours:.4g} > 2 x baseline "
                           f"{baseline:.4g}")


@pytest.fixture(params=IMPLEMENTATIONS)
def ours(request):
    """The implementation under test: fa2cpp, flash_attention_2, flash_attention_3."""
    return request.param


@pytest.fixture
def kernel_calls(monkeypatch):
    """How many dense and varlen forwards reached flashattn's library (through the one
    torch forward every frontend and route takes: flashattn.hf, the compat packages, the
    torch ops)."""
    return count_torch_forwards(monkeypatch)


def _loss(model, ids, mask, causal=True):
    """The loss over real tokens. A causal LM's position t predicts token t + 1, so the
    last left pad, whose output each implementation fills its own way, must not
    predict the first real token."""
    labels = ids.masked_fill(mask == 0, -100)
    if causal:
        labels[:, 1:] = labels[:, 1:].masked_fill(mask[:, :-1] == 0, -100)
    return model(ids, attention_mask=mask, labels=labels)


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_and_gradients(name, padding_side, ours, kernel_calls):
    models = _models(name, ours)
    reference, baseline = _reference_and_baseline(name)
    ids, mask = _batch(padding_side)
    logits, grads = {}, {}
    for implementation, model in models.items():
        model.zero_grad()
        output = _loss(model, ids, mask, causal=name != "bert-encoder")
        output.loss.backward()
        logits[implementation] = output.logits.detach()[mask.bool()]
        grads[implementation] = [p.grad for p in model.parameters()]
    assert kernel_calls["varlen"] > 0, "the padded batch never reached the kernels"

    scale = (logits[reference].max() - logits[reference].min()).float()
    _assert_within_bound(
        name, ours, f"logits/{padding_side}", _relative(logits[ours], logits[reference], scale),
        _relative(logits[baseline], logits[reference], scale), relative_to="logit range")

    largest = max(g.abs().max().float() for g in grads[reference])
    difference = lambda impl: max(_relative(a, b, largest)
                                  for a, b in zip(grads[impl], grads[reference]))
    _assert_within_bound(name, ours, f"gradients/{padding_side}", difference(ours),
                         difference(baseline), relative_to="largest gradient")


def _greedy(model, ids, mask, new_tokens):
    output = model.generate(ids, attention_mask=mask, max_new_tokens=new_tokens,
                            do_sample=False, output_logits=True, return_dict_in_generate=True,
                            pad_token_id=0)
    return output.sequences, torch.stack(output.logits, dim=1)


def _step_difference(a, b, scale):
    """Step-by-step logit difference while both runs saw the same tokens: up to and
    including the first step where their greedy choices part."""
    (tokens_a, logits_a), (tokens_b, logits_b) = a, b
    prompt = tokens_a.shape[1] - logits_a.shape[1]
    same = (tokens_a[:, prompt:] == tokens_b[:, prompt:]).all(dim=0).tolist()
    steps = same.index(False) + 1 if False in same else len(same)
    return _relative(logits_a[:, :steps], logits_b[:, :steps], scale), steps


@pytest.mark.parametrize("padded", [True, False], ids=["left-padded", "unpadded"])
@pytest.mark.parametrize("name", DECODERS)
def test_generate(name, padded, ours, kernel_calls):
    """generate() decodes through the KV cache: each step gives the attention one query
    and the cache's keys (bottom-right causal in the kernels)."""
    models = _models(name, ours)
    reference, baseline = _reference_and_baseline(name)
    ids, mask = _batch("left", batch=4 if padded else 1)
    with torch.no_grad():
        runs = {impl: _greedy(model, ids, mask, new_tokens=8) for impl, model in models.items()}
    assert kernel_calls["varlen" if padded else "dense"] > 0
    scale = (runs[reference][1].max() - runs[reference][1].min()).float()
    mine, mine_steps = _step_difference(runs[ours], runs[reference], scale)
    base, base_steps = _step_difference(runs[baseline], runs[reference], scale)
    _assert_within_bound(name, ours, f"generate/{'left-padded' if padded else 'unpadded'}",
                         mine, base, relative_to="logit range",
                         steps_compared=[mine_steps, base_steps])


def test_lora_llama_trains(ours, kernel_calls):
    peft = pytest.importorskip("peft")
    config = CONFIGS["llama-mha"]()
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=ours)
    model = peft.get_peft_model(model.to("cuda", DTYPE), peft.LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        lora_dropout=0.0))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    ids, mask = _batch("right")
    losses = []
    for _ in range(10):
        optimizer.zero_grad()
        loss = _loss(model, ids, mask).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    _record("llama-mha+lora", "training",
            {"implementation": ours, "losses": [round(x, 4) for x in losses]})
    assert kernel_calls["varlen"] > 0
    assert losses[-1] < losses[0]
    assert sum(b < a for a, b in zip(losses, losses[1:])) >= 7, losses


def test_bert_goes_through_the_attention_interface(ours, kernel_calls):
    model = _models("bert-encoder", ours)[ours]
    ids, mask = _batch("right")
    with torch.no_grad():
        model(ids, attention_mask=mask)
    assert kernel_calls["varlen"] == model.config.num_hidden_layers


def test_padding_free_training(ours, kernel_calls):
    """DataCollatorWithFlattening packs examples into one row (restarting position_ids, and
    cu_seq_lens on request): the varlen path, gradients as separate runs give within the
    eager-vs-sdpa bound."""
    models = _models("llama-mha", ours)
    generator = torch.Generator().manual_seed(2)
    examples = [{"input_ids": torch.randint(1, VOCAB, (n,), generator=generator).tolist()}
                for n in (40, 97, 5, 64)]
    grads = {}
    for flash_kwargs in (False, True):
        collator = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=flash_kwargs)
        batch = {k: v.cuda() if torch.is_tensor(v) else v for k, v in collator(examples).items()}
        for implementation, model in models.items():
            model.zero_grad()
            if implementation == ours:
                model(**batch).loss.backward()
            else:  # the references see the examples one by one
                total = sum(len(e["input_ids"]) - 1 for e in examples)
                loss = 0
                for example in examples:
                    ids = torch.tensor([example["input_ids"]], device="cuda")
                    loss = loss + model(ids, labels=ids).loss * (ids.shape[1] - 1) / total
                loss.backward()
            grads[implementation] = [p.grad.clone() for p in model.parameters()]
        largest = max(g.abs().max().float() for g in grads["sdpa"])
        difference = lambda impl: max(_relative(a, b, largest)
                                      for a, b in zip(grads[impl], grads["sdpa"]))
        packing = "cu_seq_lens" if flash_kwargs else "position_ids"
        _assert_within_bound("llama-mha", ours, f"padding-free/{packing}", difference(ours),
                             difference("eager"), relative_to="largest gradient")
    assert kernel_calls["varlen"] > 0


def test_profiler_sees_flashattn_kernels_only(ours):
    """A training step of a padded batch: flashattn's forward and backward kernels run, and
    no other FlashAttention or SDPA attention kernel."""
    model = _models("qwen2-gqa", ours)[ours]
    ids, mask = _batch("right")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        _loss(model, ids, mask).loss.backward()
        torch.cuda.synchronize()
    names = {event.name for event in prof.events()
             if event.device_type == torch.autograd.DeviceType.CUDA}
    assert any("flashattn::" in n and "fwd_kernel" in n for n in names), sorted(names)
    assert any("flashattn::" in n and "bwd_kernel" in n for n in names), sorted(names)
    others = [n for n in names if "flashattn::" not in n and
              any(word in n.lower() for word in ("flash", "fmha", "attention", "sdpa"))]
    assert not others, others
