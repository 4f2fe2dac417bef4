"""Training at scale from the IR: Megatron's tensor / sequence / pipeline / data split of a GPT-style model.

:mod:`.config` (the configuration), :mod:`.layer` (one device's layer step, lowered from shapes),
:mod:`.costs` (its analysis, once per distinct shape), :mod:`.compose` (the iteration by arithmetic),
:mod:`.memory` (bytes per GPU), :mod:`.plan` (the breakdown table and the sweep over splits); :mod:`.stdit3`
(OpenSora's STDiT3 with ZeRO-2 and Ulysses; its block pair lowered by :mod:`.stdit3_layer`).
"""
