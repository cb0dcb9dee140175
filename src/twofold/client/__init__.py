"""Clients: the `ComputeClient` structural type and in-process channels.

`ComputeClient` is what every component speaks (`spec/protocol.md` §7): the controller's view of
a replica, a runtime, the multiplexer, a network connection. `channel_pair()` connects a
controller-side `ComputeClient` to a replica-side `ReplicaEndpoint` inside one event loop.
"""

from twofold.client.channel import (
    ChannelClosed,
    ComputeClient,
    ControllerEnd,
    Pipe,
    ReplicaEndpoint,
    channel_pair,
)

__all__ = [
    "ChannelClosed",
    "ComputeClient",
    "ControllerEnd",
    "Pipe",
    "ReplicaEndpoint",
    "channel_pair",
]
