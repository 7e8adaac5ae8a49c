"""The event plane's log: tracked events, the event log interface and its backends, and
the tracker's on-disk spool.

DESIGN.md §Events and billing. ``model`` (the :class:`Event` record, its wire form and
partitioning), ``log`` (the :class:`EventLog` / :class:`Consumer` interface and its
errors, and the reader's shared part), ``memory_log`` (the embedded default),
``jetstream_log`` (NATS JetStream; import it directly) over ``jetstream_connection`` (the
loop, the bridge, the stream) and ``jetstream_consumer`` (the durable pull consumers),
``spool`` (events kept on disk while the log is unreachable).
"""

from adfunnel.events.log import (
    Consumer,
    Delivery,
    EventLog,
    EventLogError,
    EventLogUnavailable,
)
from adfunnel.events.memory_log import MemoryEventLog
from adfunnel.events.model import Event, EventType, MalformedEvent, decode, encode, partition_of

__all__ = [
    "Consumer",
    "Delivery",
    "Event",
    "EventLog",
    "EventLogError",
    "EventLogUnavailable",
    "EventType",
    "MalformedEvent",
    "MemoryEventLog",
    "decode",
    "encode",
    "partition_of",
]
