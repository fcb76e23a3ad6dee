"""Rules weight_spectra and spectra_comparison (docs/spectra.md).

weight_spectra: a model variant → spectra table (Parquet), singular values (Zarr), base
alignment (Parquet). spectra_comparison: trained + random spectra → learned-vs-random
table (Parquet + Markdown).
"""

import time
from pathlib import Path

import pandas as pd
import torch

from attnscope import __version__, io, models, spectra

snakemake = globals()["snakemake"]  # injected by Snakemake's script directive

log = io.setup_script_logging(snakemake.log[0])
params = snakemake.params
wc = snakemake.wildcards


def weight_spectra() -> None:
    options = dict(params.spectra)
    torch.set_num_threads(snakemake.threads)
    loaded = models.load_model(
        Path(snakemake.input.manifest).parent, variant=wc.variant, device=options["device"], dtype="float32"
    )
    init_std = loaded.init_std
    method = spectra.resolve_method(options["method"])
    meta = {
        "config_digest": io.config_digest(options, params.model, wc.variant, loaded.manifest["spec_digest"]),
        "rule": "weight_spectra",
        "model": loaded.name,
        "variant": loaded.variant,
        "spectra": options,
        "method": method,
        "init_std": init_std,
        "eigenvalues": "sigma^2 = eigenvalues of W^T W, not divided by N (WeightWatcher, normalize=False)",
        "notes": loaded.notes,
        "attnscope_version": __version__,
    }
    log.info(
        "spectra of %s/%s on %s with %s: %s", loaded.name, wc.variant, loaded.device, method, loaded.notes
    )
    start = time.perf_counter()
    result = spectra.compute_spectra(
        loaded.model,
        init_std,
        include_embeddings=options["include_embeddings"],
        method=method,
        threads=snakemake.threads,
        max_batch_mb=options["max_batch_mb"],
    )
    log.info("%d matrices in %.2f s", len(result.table), time.perf_counter() - start)
    alignment = spectra.base_alignment(loaded.model, init_std)
    summary = result.table.groupby("matrix", sort=False)[
        ["sum_sigma2", "sum_sigma2_init", "sv_max", "num_spikes"]
    ]
    log.info("layer means per matrix type:\n%s", summary.mean().to_string())
    log.info("base alignment z-scores:\n%s", alignment.groupby("scope")["z_score"].describe().to_string())
    labels = {"model": loaded.name, "variant": loaded.variant}
    io.write_parquet(result.table.assign(**labels), snakemake.output.table, meta)
    io.write_parquet(alignment.assign(**labels), snakemake.output.alignment, meta)
    with io.atomic_path(snakemake.output.zarr) as tmp:
        spectra.write_singular_values(result, tmp, meta)


def spectra_comparison() -> None:
    trained, random = pd.read_parquet(snakemake.input.trained), pd.read_parquet(snakemake.input.random)
    table = spectra.compare_learned_random(trained, random)
    upstream = [
        io.read_parquet_metadata(p)["config_digest"]
        for p in (snakemake.input.trained, snakemake.input.random)
    ]
    meta = {
        "config_digest": io.config_digest(params.random_variant, *upstream),
        "rule": "spectra_comparison",
        "model": wc.model,
        "random_variant": params.random_variant,
        "notes": io.read_parquet_metadata(snakemake.input.trained)["notes"],
        "attnscope_version": __version__,
    }
    io.write_parquet(table, snakemake.output.table, meta)
    title = f"{wc.model}: learned (trained) vs random ({params.random_variant}) weight spectra"
    io.write_text(spectra.comparison_markdown(table, title, meta["notes"]), snakemake.output.markdown)
    for row in table[table["row_type"] == "observation"].itertuples():
        log.info("%s %s: ratio %.3g, holds=%s", row.matrix, row.statement, row.ratio, row.holds)


{"weight_spectra": weight_spectra, "spectra_comparison": spectra_comparison}[snakemake.rule]()
