"""Rule theory_figures: the Marchenko–Pastur density (thesis fig. 2.4) and the SLERP–KL
curve with its fitted cosine (fig. 5.1), from seeded simulations."""

from attnscope import io, plots
from attnscope.theory.figures import theory_figure_inputs

log = io.setup_script_logging(snakemake.log[0])
params = snakemake.params

figures = plots.theory_figures(theory_figure_inputs(mp_shapes=params.mp_shapes, **params.theory))
for name, fig in figures.items():
    plots.save_figure(fig, [snakemake.output[f"{name}_png"], snakemake.output[f"{name}_svg"]], params.dpi)
log.info("theory figures with MP shapes %s and %s", params.mp_shapes, dict(params.theory))
