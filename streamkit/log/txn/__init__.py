"""The transaction coordinator (KIP-98): transactional ids, producer epochs and fencing, and
the COMMIT/ABORT markers that end transactions, for one node.

Modules, bottom up; each module's docstring states its invariants:

* ``errors``      ``TxnErrorCode``: the Kafka error codes a transaction request ends with
* ``txn_log``     the coordinator's durable state, one JSON file, plain code
* ``coordinator`` ``TransactionCoordinator``: the asyncio shell the wire server
  (``log/server/txn_apis.py``) and the embedded transport call

Owns: transactional ids and their producer ids and epochs, the state of each transaction,
the transaction log file (``<data>/.broker/transactions.json``), transaction markers, and the
offsets a transaction commits.
May import: the log (``manager``, ``producers``, ``records``, ``errors``) and ``_core``; never
the wire server (``log/server``), whose error codes it mirrors in ``TxnErrorCode``.
"""

from streamkit.log.txn.coordinator import TransactionCoordinator
from streamkit.log.txn.errors import TxnErrorCode
from streamkit.log.txn.txn_log import TxnEntry, TxnLog, TxnState

__all__ = [
    "TransactionCoordinator",
    "TxnEntry",
    "TxnErrorCode",
    "TxnLog",
    "TxnState",
]
