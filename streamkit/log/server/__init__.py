"""The Kafka wire protocol over asyncio: ``streamkit broker`` (kio for message codecs).

Modules, outside in: ``broker`` (lifecycle, listening socket), ``connection`` (one client:
frames in, responses out, in order), ``dispatch`` (versions, decode, handler, encode),
``codec`` (the only kio user), the handlers by area (``cluster``, ``produce``, ``fetch``,
``admin``, ``config_apis``, ``group_apis``, ``txn_apis``, ``log_dirs``, ``acl_apis``),
``state`` (what handlers share), ``notifier`` (long-poll wakeups), ``apis`` (the advertised
version table), ``messages`` (generated request and response dataclasses) and ``error_codes``
(Kafka's numbers). The group and transaction coordinators it serves live beside it
(``log/groups``, ``log/txn``) and answer with their own error-code enums (same numbers), which
the handlers put into responses.
"""

from streamkit.log.server.broker import Broker
from streamkit.log.server.config import BrokerConfig

__all__ = ["Broker", "BrokerConfig"]
