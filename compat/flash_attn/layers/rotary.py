"""flash_attn.layers.rotary: rotary position embeddings (flashattn.rotary)."""
from flashattn.rotary import (  # noqa: F401
    apply_rotary_emb,
    apply_rotary_emb_func,
    apply_rotary_emb_kv_,
    apply_rotary_emb_qkv_,
)


def __getattr__(name):
    if name == "RotaryEmbedding":  # a torch.nn.Module: torch is imported when it is asked for
        from flashattn.rotary import RotaryEmbedding
        return RotaryEmbedding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
