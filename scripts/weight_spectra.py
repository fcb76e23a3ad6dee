"""Rule weight_spectra (docs/spectra.md): each variant of a model's spectra, loaded in turn in
one job (one model start) → its spectra table, raw and RMSNorm-folded (Parquet), singular values
(Zarr), base alignment and per-head QK and OV circuits (Parquet)."""

import gc
import time
from pathlib import Path

import torch

from attnscope import circuits, io, models, spectra, spectrastore

log = io.setup_script_logging(snakemake.log[0])
params = snakemake.params
out = snakemake.output
options = dict(params.spectra)
torch.set_num_threads(snakemake.threads)
method = spectra.resolve_method(options["method"])


def variant_spectra(variant: str, table: str, store: str, alignment: str, qk: str, ov: str) -> None:
    """One variant's outputs; its model is freed when this returns."""
    loaded = models.load_model(
        Path(snakemake.input.manifest).parent, variant=variant, device=options["device"], dtype="float32"
    )
    init_std = loaded.init_std
    meta = io.job_metadata(
        snakemake,
        io.job_digest(snakemake, variant, inputs=["manifest"], leave_out=["variants"]),
        model=loaded.name,
        variant=loaded.variant,
        spectra=options,
        method=method,
        init_std=init_std,
        eigenvalues="sigma^2 = eigenvalues of W^T W, not divided by N (WeightWatcher, normalize=False)",
        notes=loaded.notes,
    )
    log.info("spectra of %s/%s on %s with %s: %s", loaded.name, variant, loaded.device, method, loaded.notes)
    start = time.perf_counter()
    result = spectra.compute_spectra(
        loaded.model,
        init_std,
        include_embeddings=options["include_embeddings"],
        method=method,
        threads=snakemake.threads,
        max_batch_mb=options["max_batch_mb"],
        randomize=options["randomize"],
        seed=options["seed"],
    )
    log.info("%d matrices in %.2f s", len(result.table), time.perf_counter() - start)
    base = spectra.base_alignment(loaded.model, init_std)
    summary = result.table.groupby(["form", "matrix"], sort=False)[
        ["sum_sigma2", "sum_sigma2_init", "sv_max", "num_spikes_init", "num_spikes"]
    ]
    log.info("layer means per matrix type:\n%s", summary.mean().to_string())
    log.info("base alignment z-scores:\n%s", base.groupby("scope")["z_score"].describe().to_string())
    labels = {"model": loaded.name, "variant": loaded.variant}
    io.write_parquet(result.table.assign(**labels), table, meta)
    io.write_parquet(base.assign(**labels), alignment, meta)
    io.write_parquet(circuits.qk_circuits(loaded.model).assign(**labels), qk, meta)
    io.write_parquet(circuits.ov_circuits(loaded.model).assign(**labels), ov, meta)
    with io.atomic_path(store) as tmp:
        spectrastore.write_singular_values(result, tmp, meta)


for outputs in zip(
    params.variants, out.table, out.zarr, out.alignment, out.qk_circuits, out.ov_circuits, strict=True
):
    variant_spectra(*outputs)
    gc.collect()
