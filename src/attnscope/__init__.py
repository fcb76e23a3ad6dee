"""attnscope: attention maps, weight spectra and ablations of instruction-tuned LLMs."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``attnscope.open_attention`` (:func:`attnscope.store.open_attention`) imported on first use:
    importing the package stays cheap (the Snakefile imports ``attnscope.config`` on every
    invocation; no NumPy, zarr or xarray), and reading a store loads no torch."""
    if name == "open_attention":
        from attnscope.store import open_attention

        return open_attention
    raise AttributeError(f"module 'attnscope' has no attribute {name!r}")
