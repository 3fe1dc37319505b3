"""flash_attn.layers: of FlashAttention's layers, flashattn serves the rotary embedding."""
