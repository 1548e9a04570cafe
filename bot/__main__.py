"""`python -m bot`: the `roundtable` command (bot.cli.main)."""
import sys

from bot.cli.main import main

sys.exit(main())
