"""Property testing for tilesparse patterns: hypothesis strategies and an equivalence check.

``specs``, ``decisions`` and ``attention_inputs`` draw patterns, decisions for a pattern and
inputs; ``assert_equivalent`` checks a compiled op's output and gradients against its
reference; ``assert_query_contained`` that a non-finite query reaches only its row and the keys
it keeps; ``assert_same_index_tensors`` checks a backend's own index building against the
IR's; ``AttentionBlock`` is a minimal model around an op, for torch.compile checks. Needs
``hypothesis`` (the ``test`` extra); importing ``tilesparse`` does not import this module.
"""

from .containment import assert_query_contained
from .equivalence import assert_equivalent, tolerance
from .index import INDEX_FIELDS, assert_same_index_tensors
from .module import AttentionBlock
from .strategies import PART_KINDS, SPEC_KINDS, attention_inputs, decisions, document_ids, key_padding_masks, specs

__all__ = [
    "INDEX_FIELDS",
    "PART_KINDS",
    "SPEC_KINDS",
    "AttentionBlock",
    "assert_equivalent",
    "assert_query_contained",
    "assert_same_index_tensors",
    "attention_inputs",
    "decisions",
    "document_ids",
    "key_padding_masks",
    "specs",
    "tolerance",
]
