"""Rule attention_figure: one attention-map figure of one target from a store.

Kinds: token_grid / word_grid, the maps of `figures.grid_layers` in a 2×2 grid (fig. 8.4,
8.5, 8.7-8.9, A.9-A.18); cosine, the input-embedding cosine beside `figures.cosine_layers`
(8.6); token_pass / word_pass, every layer (A.1-A.8); thesis_grid, the thesis's own word-level
grid (its notebook's words, the prompt only, its layers 1, 11, 21, 31 mapped onto the model's
depth, each panel on its own scale).
"""

import time

from attnscope import io, mapdata, plots
from attnscope.store import open_store

PASS_PANEL_INCHES = 3.2

log = io.setup_script_logging(snakemake.log[0])
options = snakemake.params.figures
experiment = open_store(snakemake.input.store).attrs  # category and k, for the title
wc, kind = snakemake.wildcards, snakemake.wildcards.kind
start = time.perf_counter()
maps = mapdata.read_prompt_maps(snakemake.input.store, snakemake.params.target)
header = (
    f"{wc.model} · {wc.variant} · {experiment['category']}, k = {experiment['k']} · "
    f'Target Word: "{maps.target}"' + (f' · generated clue: "{maps.clue}"' if maps.clue is not None else "")
)
color_max = options["color_max"]

if kind == "thesis_grid":
    layers = plots.thesis_layers(maps.num_layers)
    fig = plots.plot_attention_maps(
        maps.thesis_word_maps(layers),
        layers,
        maps.thesis_words,
        f"{header}\nthe thesis's word-level maps (its notebook's words, the prompt only), "
        "each panel its own scale",
        "word",
        per_panel=True,
    )
elif kind == "cosine":
    layers = plots.resolve_layers(options["cosine_layers"], maps.num_layers)
    fig = plots.plot_cosine_and_attention(
        maps.cosine(),
        maps.token_maps(layers),
        layers,
        maps.tokens,
        f"{header}\ninput-embedding cosine vs attention (token level)",
        maps.correlations(layers),
        color_max["token"],
    )
else:
    level, extent = kind.split("_")
    if extent == "grid":
        layers = plots.resolve_layers(options["grid_layers"], maps.num_layers)
        layout = {"ncols": 2}
    else:
        layers = list(range(maps.num_layers))
        layout = {"ncols": options["pass_columns"], "panel_inches": PASS_PANEL_INCHES, "progress": True}
    if level == "token":
        data, axis, subtitle = maps.token_maps(layers), maps.tokens, "token level"
        colorbar = "attention (head mean)"
    else:
        data, axis, subtitle = maps.word_maps(layers), maps.words, "word level (sum over subword pairs)"
        colorbar = "attention summed over subword pairs"
    if extent == "pass":
        subtitle += ", every layer"
    title = f"{header}\n{subtitle}"
    fig = plots.plot_attention_maps(
        data, layers, axis, title, level, color_max[level], colorbar_label=colorbar, **layout
    )
plots.save_figure(fig, [snakemake.output.png, snakemake.output.svg], options["dpi"])
log.info("%s of %s (%d layers) in %.1f s", kind, maps.target, len(layers), time.perf_counter() - start)
