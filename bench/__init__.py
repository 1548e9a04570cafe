"""The token and engine benchmark of issue 9: `python -m bench` or `roundtable bench`."""
