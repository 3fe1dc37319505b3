"""FlashAttention's modules that are not attention (flash_attn.ops.layer_norm,
flash_attn.losses.cross_entropy, flash_attn.ops.fused_dense, flash_attn.models.*, ...) are
not in this package. Importing one raises ModuleNotFoundError, an ImportError, that says
so: code that falls back when they are missing (`except ImportError`) falls back, and
code that needs them learns why they are absent rather than just that they are.
"""
import importlib.abc
import sys

_PREFIX = "flash_attn."
_SERVED = "the attention functions, flash_attn.bert_padding and flash_attn.layers.rotary"


class _NotServedFinder(importlib.abc.MetaPathFinder):
    """Asked last, after the path finders found no such module under flash_attn."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_PREFIX):
            return None
        raise ModuleNotFoundError(
            f"{fullname}: this flash_attn is flashattn's compatibility package, and flashattn "
            f"provides attention only ({_SERVED}); uninstall it (pip uninstall flash-attn) and "
            f"install FlashAttention to use {fullname}", name=fullname)


def install():
    if not any(isinstance(finder, _NotServedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_NotServedFinder())
