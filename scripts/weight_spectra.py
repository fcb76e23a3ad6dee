"""Rule weight_spectra (docs/spectra.md): a model variant → spectra table, raw and RMSNorm-folded
(Parquet), singular values (Zarr), base alignment and per-head QK and OV circuits (Parquet)."""

import time
from pathlib import Path

import torch

from attnscope import circuits, io, models, spectra, spectrastore

log = io.setup_script_logging(snakemake.log[0])
params = snakemake.params
wc = snakemake.wildcards
options = dict(params.spectra)
torch.set_num_threads(snakemake.threads)
loaded = models.load_model(
    Path(snakemake.input.manifest).parent, variant=wc.variant, device=options["device"], dtype="float32"
)
init_std = loaded.init_std
method = spectra.resolve_method(options["method"])
meta = io.job_metadata(
    snakemake,
    io.job_digest(snakemake, wc.variant, inputs=["manifest"]),
    model=loaded.name,
    variant=loaded.variant,
    spectra=options,
    method=method,
    init_std=init_std,
    eigenvalues="sigma^2 = eigenvalues of W^T W, not divided by N (WeightWatcher, normalize=False)",
    notes=loaded.notes,
)
log.info("spectra of %s/%s on %s with %s: %s", loaded.name, wc.variant, loaded.device, method, loaded.notes)
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
alignment = spectra.base_alignment(loaded.model, init_std)
qk = circuits.qk_circuits(loaded.model)
ov = circuits.ov_circuits(loaded.model)
summary = result.table.groupby(["form", "matrix"], sort=False)[
    ["sum_sigma2", "sum_sigma2_init", "sv_max", "num_spikes_init", "num_spikes"]
]
log.info("layer means per matrix type:\n%s", summary.mean().to_string())
log.info("base alignment z-scores:\n%s", alignment.groupby("scope")["z_score"].describe().to_string())
labels = {"model": loaded.name, "variant": loaded.variant}
io.write_parquet(result.table.assign(**labels), snakemake.output.table, meta)
io.write_parquet(alignment.assign(**labels), snakemake.output.alignment, meta)
io.write_parquet(qk.assign(**labels), snakemake.output.qk_circuits, meta)
io.write_parquet(ov.assign(**labels), snakemake.output.ov_circuits, meta)
with io.atomic_path(snakemake.output.zarr) as tmp:
    spectrastore.write_singular_values(result, tmp, meta)
