"""Strides as the library reads them. Frameworks leave the stride of a size-1 dimension,
and every stride of an empty array, arbitrary (numpy may report 0); those strides address
nothing, so they are replaced by the contiguous ones instead of failing validation."""


def canonical_strides(shape, strides):
    contiguous = []
    step = 1
    for size in reversed(shape):
        contiguous.append(step)
        step *= max(size, 1)
    contiguous.reverse()
    if 0 in shape:
        return contiguous
    return [c if size == 1 else s for size, s, c in zip(shape, strides, contiguous)]
