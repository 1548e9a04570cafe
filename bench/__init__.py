"""The token and engine benchmark: `python -m bench` or `roundtable bench`."""
