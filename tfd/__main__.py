"""``python -m tfd``: the same command as the ``tfd`` console script."""

from tfd.cli import main

raise SystemExit(main())
