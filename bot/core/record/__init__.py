"""The record read back: exports (HTML, JSON, Markdown) of a range of rows, and replays of
routing decisions and episodes."""
