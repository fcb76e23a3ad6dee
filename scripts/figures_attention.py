"""Rule attention_figures: every attention-map figure (the kinds of `figures.maps`) of one
store, ``{target}/{kind}.{png,svg}`` in the rule's folder; one process for all of them, as
starting Python and importing matplotlib cost more than drawing a figure. The kinds are in
plots.attention_figure and docs/figures.md."""

import time

from attnscope import io, mapdata, plots
from attnscope.store import open_store

log = io.setup_script_logging(snakemake.log[0])
params, wc = snakemake.params, snakemake.wildcards
options = params.figures
experiment = open_store(snakemake.input.store).attrs  # category and k, for the title
with io.atomic_path(snakemake.output.maps) as folder:  # the folder appears when every figure is in it
    for slug, entry in params.maps.items():
        maps = mapdata.read_prompt_maps(snakemake.input.store, entry["target"])
        header = (
            f"{wc.model} · {wc.variant} · {experiment['category']}, k = {experiment['k']} · "
            f'Target Word: "{maps.target}"'
            + (f' · generated clue: "{maps.clue}"' if maps.clue is not None else "")
        )
        for kind in entry["kinds"]:
            start = time.perf_counter()
            fig = plots.attention_figure(maps, kind, options, header)
            paths = [folder / slug / f"{kind}.{ext}" for ext in params.formats]
            plots.save_figure(fig, paths, options["dpi"])
            log.info("%s of %s in %.1f s", kind, maps.target, time.perf_counter() - start)
