"""streamkit: Kafka's stream-processing model for Python.

Importing this package stays cheap: it loads no RocksDB, Spark or Kafka client.
"""

from streamkit._core.errors import StreamkitError
from streamkit._core.types import TopicPartition

__all__ = ["StreamkitError", "TopicPartition", "__version__"]

__version__ = "0.1.0"
