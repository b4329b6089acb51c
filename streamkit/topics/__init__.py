"""Topic declarations: a name, partitions, serializers and log configuration, and the port
through which a declaration sends when it has no worker (``ports``).

Owns: ``topic`` (Topic, Sender, headers, timestamps), ``ports`` (what the runtime installs).
May import: ``windows``, ``tables``, ``transport``'s protocols and ``_core``; never a layer
above (``agents``, ``dsl``, ``app``, ``runtime``, ...).
"""
