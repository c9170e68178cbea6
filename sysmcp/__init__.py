"""sysmcp: a sysadmin tool server that speaks the Model Context Protocol over stdio."""

__version__ = "0.1.0"
