"""The IR: lowering specs to programs, preparing runtime index tensors, checking invariants."""

from ..patterns.device_constants import device_constant
from . import program
from .inputs import SUPPORTED_DTYPES, AttentionInputs, check_inputs, check_scale, check_tensor_args
from .inspect import (
    ideal_tiles,
    layout_mask_rows,
    sparsity,
    tile_classes,
    tile_map,
    tile_stats,
    to_dense,
    to_string,
)
from .lower import lower
from .prepare import (
    Prepared,
    PreparedGroup,
    max_segments,
    prepare,
    prepare_group,
    resolve_heads,
)
from .program import *  # noqa: F403 (the node kinds: program.__all__ lists them once)
from .semantics import (
    DROPPED_K_BUCKET,
    DROPPED_Q_BUCKET,
    KEY_SENTINEL,
    QUERY_SENTINEL,
    dense_mask,
    element_mask,
    keep_element,
)
from .tiles import tile_intervals, visited_tiles
from .verify import verify

__all__ = [
    *program.__all__,
    "DROPPED_K_BUCKET",
    "DROPPED_Q_BUCKET",
    "KEY_SENTINEL",
    "QUERY_SENTINEL",
    "SUPPORTED_DTYPES",
    "AttentionInputs",
    "Prepared",
    "PreparedGroup",
    "check_inputs",
    "check_scale",
    "check_tensor_args",
    "dense_mask",
    "device_constant",
    "element_mask",
    "ideal_tiles",
    "keep_element",
    "layout_mask_rows",
    "lower",
    "max_segments",
    "prepare",
    "prepare_group",
    "resolve_heads",
    "sparsity",
    "tile_intervals",
    "visited_tiles",
    "tile_classes",
    "tile_map",
    "tile_stats",
    "to_dense",
    "to_string",
    "verify",
]
