"""Tables: keyed state on RocksDB (or memory), written through to a compacted changelog.

``table.py`` declares (``app.Table``), ``partition.py`` holds one partition's live state,
``store.py`` the stores, ``recovery.py`` opens and restores a partition, ``changelog.py`` is the
port to a log the runtime implements. This package imports neither ``log/`` nor ``transport/``.

Owns: what the paragraph above lists.
May import: ``_core`` only.
"""

from streamkit.tables.errors import CorruptStateError, PartitionNotHeldError, TableError
from streamkit.tables.table import Table

__all__ = ["CorruptStateError", "PartitionNotHeldError", "Table", "TableError"]
