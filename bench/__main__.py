"""`python -m bench`: issue 9's benchmark (see bench.cli)."""
import sys

from bench.cli import main

sys.exit(main())
