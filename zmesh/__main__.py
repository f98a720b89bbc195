"""`python -m zmesh` runs the command line."""

from zmesh.cli import main

raise SystemExit(main())
