"""The MCP protocol core: framing, JSON-RPC, lifecycle, session. It never imports ``sysmcp.tools``."""
