"""Test an app's agents with the real runtime, no broker: ``streamkit.testing``.

``AppDriver`` runs the app's real ``Worker`` over the embedded log in a temporary directory,
with a ``ManualClock``: records sent without a timestamp get the clock's time, and timers
fire and ``take(..., within=)`` cuts its batches only when the test advances the clock.

    >>> import asyncio, streamkit as sk
    >>> from streamkit.testing import AppDriver
    >>> app = sk.App("docs-testing")
    >>> words = app.topic("words", value_type=str)
    >>> shouted = app.topic("shouted", value_type=str)
    >>> @app.agent(words, sink=[shouted])
    ... async def shout(stream):
    ...     async for word in stream:
    ...         yield word.upper()
    >>> async def check():
    ...     async with AppDriver(app) as driver:
    ...         await driver.send(words, "hello")
    ...         await driver.process()
    ...         return [e.value for e in await driver.read(shouted)]
    >>> asyncio.run(check())
    ['HELLO']

Owns: ``AppDriver`` (``driver``).
May import: ``spark`` (nothing today), ``runtime`` and every layer below it; never ``cli`` or
``web``.
"""

from streamkit.testing.driver import AppDriver

__all__ = ["AppDriver"]
