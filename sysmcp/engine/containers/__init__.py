"""Containers: what Docker or Podman holds on disk, from its API or its command (container_usage's engine).

This is the room's front door: other rooms import these names from here, never a private module.
"""

from sysmcp.engine.containers._model import BuildCache, Container, Image, LogFile, Volume
from sysmcp.engine.containers._survey import (
    ContainersRequest,
    DataRootWalk,
    Log,
    Survey,
    find_socket,
    known_socket_at,
    known_sockets,
    survey,
)

__all__ = [
    "BuildCache",
    "Container",
    "ContainersRequest",
    "DataRootWalk",
    "Image",
    "Log",
    "LogFile",
    "Survey",
    "Volume",
    "find_socket",
    "known_socket_at",
    "known_sockets",
    "survey",
]
