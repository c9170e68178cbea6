"""Duplicates: sieves by size, then by sampled and whole content, into groups of identical files.

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.duplicates._duplicates import Candidate, DuplicatesRequest, Search, find_duplicates

__all__ = ["Candidate", "DuplicatesRequest", "Search", "find_duplicates"]
