"""Rule claims: the thesis-claims table of every selected model (Parquet, Markdown, and an
HTML page for the report)."""

import pandas as pd

from attnscope import __version__, claims, io, report
from attnscope.store import open_store

log = io.setup_script_logging(snakemake.log[0])
tables = []
for model, layout in snakemake.params.layout.items():
    experiment = layout["experiment"]
    metrics = pd.concat(
        [
            claims.head_mean_rows(pd.read_parquet(path), variant)
            for variant, path in layout["metrics"].items()
        ],
        ignore_index=True,
    )
    prompts = {
        exp: pd.read_parquet(path).set_index("prompt_index") for exp, path in layout["prompts"].items()
    }
    clue_frames = []
    for variant, exp, path in layout["clues"]:
        clues = pd.read_parquet(path)
        words = prompts[exp].loc[clues["prompt_index"], "words"]
        clues["copy_share"] = [claims.copy_share(c, w) for c, w in zip(clues["clue"], words)]
        clue_frames.append(clues.assign(variant=variant, experiment=exp))
    evidence = claims.Evidence(
        model=model,
        experiment=experiment,
        metrics=metrics,
        value_domain=claims.store_value_domain(layout["store"]) if layout["store"] else None,
        spectra=pd.read_parquet(layout["spectra"]),
        alignment=pd.read_parquet(layout["alignment"]),
        clues=pd.concat(clue_frames, ignore_index=True),
    )
    table = claims.evaluate(evidence)
    for row in table.itertuples():
        log.info("%s %s: %s (%s)", model, row.claim, row.verdict, row.measured)
    tables.append(table)
table = pd.concat(tables, ignore_index=True)
# The layout names the inputs; their digests say what they hold (generation, attention, spectra settings).
upstream = {
    path: open_store(path).attrs["config_digest"]
    if path.endswith(".zarr")
    else io.read_parquet_metadata(path)["config_digest"]
    for path in snakemake.input
}
thresholds = claims.Thresholds().__dict__
meta = {
    "config_digest": io.config_digest(snakemake.params.layout, upstream, thresholds),
    "rule": "claims",
    "thresholds": thresholds,
    "attnscope_version": __version__,
}
io.write_parquet(table, snakemake.output.table, meta)
io.write_text(claims.claims_markdown(table), snakemake.output.markdown)
sections = [
    (
        f"{model} (experiment {rows['experiment'].iloc[0]})",
        ", ".join(f"{n} {v}" for v, n in rows["verdict"].value_counts().items()),
        rows.drop(columns=["model", "claim", "value", "experiment"]),
    )
    for model, rows in table.groupby("model", sort=False)
]
intro = (
    "Each qualitative claim of the thesis (ch. 7.2.2, 8, 9.1), the metric that tests it, the measured values "
    "and the verdict at the stated threshold; attention metrics are head-mean maps averaged over the prompts."
)
io.write_text(
    report.html_page("Thesis claims against the measurements", sections, intro), snakemake.output.html
)
