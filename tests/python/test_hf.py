"""flashattn.hf: tiny randomly initialized Transformers models give the logits of the
eager implementation with padded batches, packed sequences, sliding windows, softcap."""
import copy

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import flashattn.hf  # noqa: E402

NAME = flashattn.hf.register()


def _pair(config):
    """The same weights under fa2cpp and under eager attention, each model from its own copy
    of the config: Transformers sets the implementation on the config object a model was
    built from, so a shared one would switch the first model to eager too."""
    torch.manual_seed(0)
    ours = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                         attn_implementation=NAME)
    eager = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config),
                                                          attn_implementation="eager")
    assert ours.config._attn_implementation == NAME
    eager.load_state_dict(ours.state_dict())
    return ours.eval(), eager.eval()


def _llama(**extra):
    config = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaConfig(**{**config, **extra})


def _assert_logits_close(actual, expected, mask=None):
    if mask is not None:
        actual, expected = actual[mask.bool()], expected[mask.bool()]
    torch.testing.assert_close(actual, expected, atol=2e-4, rtol=2e-4)


def test_name_with_flash_is_refused():
    with pytest.raises(ValueError, match="flash"):
        flashattn.hf.register("flash_cpp")


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_padded_batch(padding_side):
    ours, eager = _pair(_llama())
    ids = torch.randint(0, 97, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    pad = slice(None, 4) if padding_side == "left" else slice(7, None)
    mask[1, pad] = 0
    mask[2, (slice(None, 1) if padding_side == "left" else slice(10, None))] = 0
    with torch.no_grad():
        _assert_logits_close(ours(ids, attention_mask=mask).logits,
                             eager(ids, attention_mask=mask).logits, mask)


def test_packed_sequences_match_separate_runs():
    ours, eager = _pair(_llama())
    lengths = [5, 3, 8]
    sequences = [torch.randint(0, 97, (1, n)) for n in lengths]
    ids = torch.cat(sequences, dim=1)
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        packed = ours(ids, position_ids=position_ids, use_cache=False).logits
        separate = torch.cat([eager(s).logits for s in sequences], dim=1)
    _assert_logits_close(packed, separate)


def test_packing_is_found_once_per_forward_pass(monkeypatch):
    """Finding the sequence starts in position_ids synchronizes with the device: every layer
    of a pass shares the answer; a new tensor, or the same one written in place, is read
    again, and the answer is still right for it."""
    ours, eager = _pair(_llama(num_hidden_layers=3))
    calls = []
    find = flashattn.hf._find_packing
    monkeypatch.setattr(flashattn.hf, "_find_packing",
                        lambda positions: calls.append(1) or find(positions))
    lengths = [5, 3, 8]
    ids = torch.cat([torch.randint(0, 97, (1, n)) for n in lengths], dim=1)
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        first = ours(ids, position_ids=position_ids, use_cache=False).logits
        assert len(calls) == 1, "three layers, one pass: one search"
        position_ids[0, 5:] = torch.arange(11)  # now two sequences, 5 and 11 tokens
        second = ours(ids, position_ids=position_ids, use_cache=False).logits
        assert len(calls) == 2, "the tensor was written in place: searched again"
        expected = torch.cat([eager(ids[:, :5]).logits, eager(ids[:, 5:]).logits], dim=1)
    _assert_logits_close(second, expected)
    assert not torch.allclose(first, second)


def test_padding_is_read_once_per_forward_pass(monkeypatch):
    """Finding the tokens of a padding mask synchronizes with the device: every layer of a pass
    shares them; the mask written in place is read again, and the result is still right."""
    ours, eager = _pair(_llama(num_hidden_layers=3))
    calls = []
    layout = flashattn.hf._token_layout
    monkeypatch.setattr(flashattn.hf, "_token_layout",
                        lambda rows, mask: calls.append(1) or layout(rows, mask))
    ids = torch.randint(0, 97, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0
    with torch.no_grad():
        ours(ids, attention_mask=mask).logits
        assert len(calls) == 1, "three layers, one pass: one search"
        mask[2, 9:] = 0
        got = ours(ids, attention_mask=mask).logits
        assert len(calls) == 2, "the mask was written in place: searched again"
        _assert_logits_close(got, eager(ids, attention_mask=mask).logits, mask)


def test_inference_mode_packed_and_padded():
    """Inference tensors keep no version counter: under torch.inference_mode the token
    positions are found every time, and the results stay right."""
    ours, eager = _pair(_llama())
    ids = torch.randint(0, 97, (1, 16))
    position_ids = torch.cat([torch.arange(9), torch.arange(7)])[None]
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0
    with torch.inference_mode():
        packed = ours(ids, position_ids=position_ids, use_cache=False).logits
        separate = torch.cat([eager(ids[:, :9]).logits, eager(ids[:, 9:]).logits], dim=1)
        padded = ours(ids.view(2, 8), attention_mask=mask).logits
        expected = eager(ids.view(2, 8), attention_mask=mask).logits
    _assert_logits_close(packed, separate)
    _assert_logits_close(padded, expected, mask)


def test_sliding_window():
    config = transformers.MistralConfig(vocab_size=97, hidden_size=64, intermediate_size=96,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, sliding_window=4,
                                        max_position_embeddings=64)
    ours, eager = _pair(config)
    ids = torch.randint(0, 97, (2, 13))
    with torch.no_grad():
        _assert_logits_close(ours(ids).logits, eager(ids).logits)


def test_softcap_and_alternating_windows():
    config = transformers.Gemma2Config(vocab_size=97, hidden_size=64, intermediate_size=96,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=16, sliding_window=4,
                                       attn_logit_softcapping=5.0, max_position_embeddings=64)
    ours, eager = _pair(config)
    ids = torch.randint(0, 97, (2, 10))
    with torch.no_grad():
        _assert_logits_close(ours(ids).logits, eager(ids).logits)


def test_generate_with_padding_and_cache():
    ours, eager = _pair(_llama())
    ids = torch.randint(1, 97, (2, 7))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # generation pads on the left
    settings = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(ours.generate(ids, **settings), eager.generate(ids, **settings))


def test_training_step_gradients():
    ours, eager = _pair(_llama())
    ids = torch.randint(0, 97, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    for model in (ours, eager):
        model.train()
        model(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss.backward()
    for (name, a), (_, b) in zip(ours.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-4, rtol=1e-3, msg=name)


def test_packed_sequences_from_cu_seq_lens():
    """What DataCollatorWithFlattening passes: offsets instead of a mask."""
    ours, eager = _pair(_llama())
    lengths = [4, 9]
    sequences = [torch.randint(0, 97, (1, n)) for n in lengths]
    cu = torch.tensor([0, 4, 13], dtype=torch.int32)
    position_ids = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        packed = ours(torch.cat(sequences, dim=1), position_ids=position_ids, use_cache=False,
                      cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=9, max_length_k=9).logits
        separate = torch.cat([eager(s).logits for s in sequences], dim=1)
    _assert_logits_close(packed, separate)


@pytest.mark.parametrize("compiled, padded",
                         [(False, False), (False, True), (True, False), (True, True)],
                         ids=["unpadded", "left_padded", "compiled_unpadded",
                              "compiled_left_padded"])
def test_generate_with_a_static_cache(compiled, padded):
    # A static cache hands every layer the whole preallocated cache, most of it not yet
    # filled; without padding Transformers passes no mask (some versions pass a mask of
    # ones), and the unfilled slots must still be left out. Compiled with fullgraph=True, no
    # shape may depend on how many are filled nor on the padding: a padding mask is then
    # attended on the device, not unpadded.
    ours, eager = _pair(_llama())
    ids = torch.randint(1, 97, (2, 7))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :3] = 0
    settings = dict(attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0,
                    cache_implementation="static")
    if compiled:
        torch._dynamo.reset()
        ours.forward = torch.compile(ours.forward, fullgraph=True)
    with torch.no_grad():
        assert torch.equal(ours.generate(ids, **settings), eager.generate(ids, **settings))


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
def test_generate_compiled_by_transformers(padded):
    # What a user gets from generate(cache_implementation="static"): Transformers compiles the
    # decoding step itself (on CUDA; _compile_all_devices lets it on the CPU too), making the
    # masks ahead of the compiled forward. Each step must then trace with fullgraph=True and
    # the same static shapes, or every step would recompile (and record new CUDA graphs).
    if not hasattr(transformers.CompileConfig, "_compile_all_devices"):
        pytest.skip("this Transformers compiles generate() on CUDA only")
    graphs = []

    def recording_backend(graph, example_inputs):
        graphs.append([tuple(x.shape) for x in example_inputs if isinstance(x, torch.Tensor)])
        return graph.forward

    ours, eager = _pair(_llama())
    ids = torch.randint(1, 97, (2, 7))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :3] = 0
    compile_config = transformers.CompileConfig(fullgraph=True, backend=recording_backend,
                                                mode=None)
    compile_config._compile_all_devices = True
    settings = dict(attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0,
                    cache_implementation="static")
    torch._dynamo.reset()
    with torch.no_grad():
        got = ours.generate(ids, compile_config=compile_config, **settings)
        assert torch.equal(got, eager.generate(ids, **settings))
    assert graphs, "Transformers compiled no decoding step"
    dynamic = [shape for shapes in graphs for shape in shapes
               if not all(isinstance(size, int) for size in shape)]
    assert not dynamic, f"decoding steps recompiled with dynamic shapes: {dynamic}"
