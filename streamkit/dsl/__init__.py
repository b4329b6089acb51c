"""The declarative DSL (Kafka Streams' KStream/KTable): ``app.stream(topic).group_by(...)
.count(...)`` and kin.

Owns: ``builders`` (KStream, KTable, ...: what users call), ``nodes`` (a pipeline as data),
``plan`` (a pipeline lowered into stages, internal topics declared once), ``ops`` (the
operators and folds both runners run), ``joinstate`` (a stream-stream join's state table).
May import: ``agents``, ``topics``, ``windows``, ``tables``, ``_core``; never ``app``
(type-only imports aside), ``runtime``, ``spark`` or anything above (the worker compiles the
plan into agents in ``runtime/stages.py``).
"""
