"""What the tests share, in one place (registered from ``tests/conftest.py``).

- ``plugin``: the shared fixtures: ``broker`` (a ``streamkit broker`` process per module, its
  arguments from ``broker_args``), ``broker_factory`` (brokers a test starts and restarts
  itself), ``log_url`` (the same test on the embedded log, ``streamkit broker`` and Apache Kafka),
  ``unique`` (names on the shared broker and Kafka), ``data_dir``,
  ``faust_python``; every broker a fixture started must exit cleanly at teardown.
- ``broker``: ``BrokerProcess`` (the broker as a subprocess) and ``WireClient`` (a raw Kafka
  wire client on aiokafka's structs), for tests that start brokers themselves.
- ``processes``: following and stopping ``streamkit worker`` subprocesses, and free ports.
- ``kafka``: ``KafkaCluster``, Apache Kafka's KRaft nodes on loopback, and their faults.
- ``outage``: a counting ``streamkit worker`` on Kafka, input flowing into it through faults,
  and the exactly-once / at-least-once checks of its counts (the outage and fault tests).
"""
