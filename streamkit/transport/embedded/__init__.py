"""The embedded driver: the commit log in this process, no sockets (``file://DIR``).

The process that opens the data directory owns it (``LogManager`` takes its lock). A worker
also serves it over the wire (``transport/serving.py``), so a second worker of the same app
joins its consumer group there; otherwise an embedded consumer group has exactly one member,
assigned every partition of the topics it subscribes to.

Modules, one per role; each module's docstring states its invariants:

* ``client``        ``EmbeddedLogClient``: opens the log, hands out the others, holds the
  producer state and transaction coordinator they share
* ``producer``      ``EmbeddedProducer``: records buffered per partition, appended as batches
* ``transactional`` ``EmbeddedTransactionalProducer``: exactly-once, through ``log/txn``
* ``consumer``      ``EmbeddedConsumer``: a consumer-group member
* ``group``         ``GroupMembership``: the consumer's membership in a group on the served
  broker's coordinator, beside members in other processes
* ``reader``        ``EmbeddedReader``: reads a partition by offset (and the committed-only
  reads the consumer shares)

Only the client is exported here: the others come from its methods.
"""

from streamkit.transport.embedded.client import EmbeddedLogClient

__all__ = ["EmbeddedLogClient"]
