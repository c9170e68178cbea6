"""Filesystem helpers shared by the tools: path policy, safe opening, display of names."""
