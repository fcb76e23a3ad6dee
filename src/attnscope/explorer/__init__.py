"""The attention explorer: a local web page over the attention stores of a finished run
(``attnscope explore RESULTS_DIR``; docs/explorer.md): :mod:`.reader` reads the stores (the arrays
of each map kind and level: :mod:`.kinds`), :mod:`.server` serves them (:mod:`.errors`: the
answers it cannot give)."""

from attnscope.explorer.reader import StoreReader
from attnscope.explorer.server import make_server

__all__ = ["StoreReader", "make_server"]
