"""``python -m sysmcp`` runs the same entry point as the ``sysmcp`` console script."""

from sysmcp.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
