"""flash_attn.bert_padding: between padded batches and packed (varlen) rows (flashattn's)."""
from flashattn.bert_padding import (  # noqa: F401
    index_first_axis,
    index_put_first_axis,
    pad_input,
    unpad_input,
    unpad_input_for_concatenated_sequences,
)
