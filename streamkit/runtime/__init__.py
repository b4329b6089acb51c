"""The only place that wires everything: worker, partition tasks, commits, rebalances, errors."""

from streamkit.runtime.worker import Worker

__all__ = ["Worker"]
