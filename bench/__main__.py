"""`python -m bench`: the token and engine benchmark (see bench.cli)."""
import sys

from bench.cli import main

sys.exit(main())
