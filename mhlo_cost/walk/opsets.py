"""The op names the vector rules group (elementwise, transcendental, data movement) and the custom_call targets
known to carry no work. Standard library only: the estimate and the collectors read them without jaxlib."""
from __future__ import annotations

#: Ops with one operation per output element (their rules: :mod:`mhlo_cost.walk.vector`).
ELEMENTWISE = frozenset({
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "max", "min", "negate", "abs",
    "sign", "compare", "select", "clamp", "and", "or", "xor", "not", "floor", "ceil", "round_nearest_afz",
    "round_nearest_even", "round", "shift_left", "shift_right_arithmetic", "shift_right_logical", "popcnt",
    "count_leading_zeros", "clz", "is_finite", "real", "imag", "complex", "square", "next_after",
    "is_inf", "is_neg_inf", "is_pos_inf", "conj", "polygamma",
})

#: Ops with one transcendental per output element.
TRANSCENDENTAL = frozenset({
    "exponential", "exp", "log", "rsqrt", "sqrt", "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "erf",
    "erfc", "erf_inv", "exponential_minus_one", "expm1", "log_plus_one", "log1p", "atan2", "power", "pow",
    "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "lgamma", "digamma", "zeta",
    "bessel_i1e",
})

#: Ops that move or relabel data and compute nothing.
DATA_MOVEMENT = frozenset({
    "reshape", "transpose", "broadcast_in_dim", "broadcast", "slice", "dynamic_slice", "dynamic_update_slice",
    "concatenate", "convert", "bitcast_convert", "bitcast", "gather", "pad", "iota", "constant",
    "reverse", "copy", "get_tuple_element", "tuple", "optimization_barrier", "reduce_precision",
    "real_dynamic_slice", "get_dimension_size", "torch_index_select", "after_all", "create_token",
    "partition_id", "replica_id", "rng_get_and_update_state", "add_dependency", "sharding_constraint",
    "propagation_barrier", "sharding_group", "reshard", "domain", "uniform_quantize", "uniform_dequantize",
    "stochastic_convert",
    # dynamic_* forms with static result types move the same data as their static ops
    "dynamic_broadcast_in_dim", "dynamic_reshape", "dynamic_iota", "dynamic_pad", "dynamic_gather",
})

#: custom_call targets that only carry sharding or placement: data movement, not unknown work.
KNOWN_CUSTOM_CALLS = frozenset({
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "annotate_device_placement", "MoveToHost",
    "MoveToDevice", "LayoutConstraint", "xla.sdy.GlobalToLocalShape", "xla.sdy.LocalToGlobalShape",
    "xla.sdy.FuncResultSharding", "local_sharding_constraint", "X64Combine", "X64SplitLow", "X64SplitHigh",
})
