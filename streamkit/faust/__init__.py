"""Faust's surface, for apps written for faust-streaming (``import streamkit as faust``):
its top-level type names and helpers, and its windowed tables (``table.tumbling(...)``,
``.current()``, ``.relative_to_stream()``).

Owns: ``typenames`` (StreamT, TopicT, AgentT, ...), ``windows`` (Faust's windowed tables
over streamkit's windowed stores).
May import: ``agents``, ``topics``, ``windows``, ``tables``, ``_core``; never ``app``,
``dsl`` or anything above.
"""
