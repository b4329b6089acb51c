"""Agents (``@app.agent``): the imperative API. An agent is an async function over a
``Stream`` of an input topic or in-memory channel, and may answer requests (``ask``).

Owns: ``agent`` (Agent, sinks), ``stream`` (Stream, Event: the operator chain an agent
iterates), ``channel`` (in-memory channels), ``replies`` (agent RPC on reply topics).
May import: ``topics`` and the layers below it (``windows``, ``tables``, ``transport``,
``_core``); never ``app`` (type-only imports aside), ``dsl`` or anything above.
"""
