"""attnscope: attention maps, weight spectra and ablations of instruction-tuned LLMs."""

__version__ = "0.1.0"
