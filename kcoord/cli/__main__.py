"""``python -m kcoord.cli``: the ``kcoord`` command without the console script (runs the
kcoord found on ``sys.path``, e.g. a checkout named by PYTHONPATH)."""

from . import main

main()
