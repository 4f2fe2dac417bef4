"""PyTorch's default float32 math modes, under which both of its execution models run (``--execution eager``,
:func:`.eager.eager`; ``--execution inductor``, :func:`.inductor.inductor`: Inductor calls the same cuDNN
convolution as an extern kernel).

PyTorch allows TF32 in cuDNN convolutions and not in matrix multiplications by default
(``torch.backends.cudnn.allow_tf32`` is True, ``torch.backends.cuda.matmul.allow_tf32`` is False, that is
``torch.get_float32_matmul_precision() == "highest"``; PyTorch's "CUDA semantics" notes, "TensorFloat-32 (TF32)
on Ampere (and later) devices"). An f32 convolution therefore runs on the TF32 tensor cores of a chip that has
them (a cuDNN one: a float32 depthwise convolution runs ATen's own kernel on the CUDA cores, :mod:`.conv_calls`),
whatever the profile's ``f32_matmul`` says for dots; an f32 matmul keeps the profile's rule (its CUDA-core
f32 rate by default). :func:`torch_times` reprices the f32 convolutions of a program that way.
"""
from __future__ import annotations

from dataclasses import replace

from ..machines.hardware import Hardware, canonical_dtype
from .conv_calls import cudnn_convolution
from .optime import OpTime, op_time


def tf32_convolution(r, hw: Hardware) -> bool:
    """Whether PyTorch runs row ``r`` as an f32 cuDNN convolution on TF32 tensor cores on ``hw`` where the
    profile prices f32 on another unit (a chip with a ``tf32`` matrix rate and ``f32_matmul`` not ``tf32``)."""
    if r.kind != "conv" or hw.f32_matmul == "tf32" or "tf32" not in hw.matrix_flops or not cudnn_convolution(r):
        return False  # (a float32 depthwise convolution runs ATen's own kernel on the CUDA cores: .conv_calls)
    return any(canonical_dtype(t.dtype) == "f32" for t in r.operands[:2])


def torch_times(rows, times: list[OpTime], hw: Hardware) -> list[OpTime]:
    """``times`` with each f32 convolution repriced as PyTorch runs it by default (:func:`tf32_convolution`: at
    the chip's TF32 rate); the same list where there is none."""
    marked = [i for i, r in enumerate(rows) if tf32_convolution(r, hw)]
    if not marked:
        return times
    conv_hw = replace(hw, f32_matmul="tf32")
    out = list(times)
    for i in marked:
        out[i] = op_time(rows[i], conv_hw)
    return out
