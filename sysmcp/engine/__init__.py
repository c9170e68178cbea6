"""The engines: the work itself, with no MCP in sight.

Each room below is a package whose ``__init__`` is its front door: what other rooms may use. Its
private modules start with ``_``. A typed request goes in, a typed result comes out; progress and
cancellation come through the caller's callbacks; faults are ``EngineError`` subclasses that carry
facts, worded for a model only by ``sysmcp.tools``.
"""
