"""The declarative DSL (Kafka Streams' KStream/KTable): ``app.stream(topic).group_by(...)
.count(...)`` and kin.

Owns: ``builders`` (the DSL's nodes and builders, and their compilation into agents).
May import: ``agents`` (a compiled pipeline runs as agents over streams), ``topics``,
``windows``, ``tables``, ``_core``; never ``app`` (type-only imports aside), ``runtime``,
``spark`` or anything above.
"""
