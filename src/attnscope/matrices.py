"""The names of a decoder layer's weight matrices and of the forms they are measured in: the
vocabulary the spectra, the circuits, the comparison and the claims share (no torch here)."""

from __future__ import annotations

ATTENTION_TYPES = ("q", "k", "v", "o")
MLP_TYPES = ("gate", "up", "down")
MATRIX_TYPES = ATTENTION_TYPES + MLP_TYPES
"""Per-layer matrices, in forward order."""
EMBEDDING_TYPES = ("embed", "lm_head")
"""Optional: the input embedding and, when it is not tied to it, the LM head."""
MATRIX_FORMS = ("raw", "folded")
"""The stored matrices (what the thesis measured) first; folded: W·diag(γ) of the RMSNorm it reads."""
