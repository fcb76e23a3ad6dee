"""The singular values of a model variant's weight matrices as a Zarr v3 group (``{variant}.zarr``,
docs/spectra.md): written by the rule weight_spectra, read by the figures, without the torch that
computing them (:mod:`attnscope.spectra`) needs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.store import open_store

if TYPE_CHECKING:
    from attnscope.spectra import Spectra


def write_singular_values(spectra: Spectra, path: str | os.PathLike, attrs: Mapping[str, Any]) -> None:
    """A Zarr v3 group at ``path``: one float64 array ``[layer, sv]`` of σ (descending) per type.

    Each array's attributes give its layer indices and matrix shape; ``attrs`` go on the
    group. Write into a temporary path (``io.atomic_path``) and rename.
    """
    import zarr

    root = zarr.open_group(str(Path(path)), mode="w", zarr_format=3, attributes=dict(attrs))
    for matrix, lam in spectra.sigma2.items():
        rows, cols = spectra.shapes[matrix]
        root.create_array(
            matrix,
            data=np.sqrt(lam),
            chunks=lam.shape,
            config={"write_empty_chunks": True},  # a chunk that is not there reads as damage
            dimension_names=("layer", "sv"),
            attributes={"layers": list(spectra.layers[matrix]), "rows": rows, "cols": cols},
        )


def read_singular_values(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """``{matrix: σ [layer, sv]}`` from a store written by :func:`write_singular_values` (missing
    data raises, :func:`attnscope.store.open_store`)."""
    root = open_store(path)
    return {name: np.asarray(array[...]) for name, array in root.arrays()}
