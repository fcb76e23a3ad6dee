"""Rule attention_figure: one attention-map figure (a kind of `figures.maps`) of one target
from a store; the kinds are in plots.attention_figure and docs/figures.md."""

import time

from attnscope import io, mapdata, plots
from attnscope.store import open_store

log = io.setup_script_logging(snakemake.log[0])
options, kind = snakemake.params.figures, snakemake.wildcards.kind
experiment = open_store(snakemake.input.store).attrs  # category and k, for the title
wc = snakemake.wildcards
start = time.perf_counter()
maps = mapdata.read_prompt_maps(snakemake.input.store, snakemake.params.target)
header = (
    f"{wc.model} · {wc.variant} · {experiment['category']}, k = {experiment['k']} · "
    f'Target Word: "{maps.target}"' + (f' · generated clue: "{maps.clue}"' if maps.clue is not None else "")
)
fig = plots.attention_figure(maps, kind, options, header)
plots.save_figure(fig, [snakemake.output.png, snakemake.output.svg], options["dpi"])
log.info("%s of %s in %.1f s", kind, maps.target, time.perf_counter() - start)
