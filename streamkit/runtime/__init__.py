"""The only place that wires everything: worker, partition tasks, commits, rebalances, errors.

Owns: the worker and its partition tasks (which see the worker only through a
``TaskContext``), rebalances, the fetch loop, inboxes, commits and transactions, timers, the
app's tasks and services, the worker's report, the script runtime (``standalone``), the
topology report.
May import: ``app``, ``faust``, ``dsl``, ``agents``, ``topics`` and the layers below; never
``cli``, ``web``, ``spark`` or ``testing``.
"""

from streamkit.runtime.worker import Worker

__all__ = ["Worker"]
