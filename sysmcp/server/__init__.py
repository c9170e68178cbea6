"""The server: the MCP method table (``methods``), the prompts it offers and the client's roots it keeps."""

from sysmcp.server.methods import ANSWER_BUDGET, SERVER_DETAILS, Server, build_server

__all__ = ["ANSWER_BUDGET", "SERVER_DETAILS", "Server", "build_server"]
