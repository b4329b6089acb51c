package io.streamkit.interop.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs one case in a fresh TopologyTestDriver (one partition, record cache off so every update
 * is emitted, a fixed start time) and answers its outcome: the records written to "out" in
 * order, the final contents of each store, and the task's dropped-records-total.
 */
public final class Runner {
    /** TopologyTestDriver's wall clock: AppDriver's default start. */
    public static final long START_MS = 1_700_000_000_000L;

    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    private static final Serde<String> S = Serdes.String();
    private static final Serde<JsonNode> J = JsonSerde.serde();

    /**
     * This JVM's own state directory: Kafka Streams' default (/tmp/kafka-streams/oracle) is shared
     * by every oracle on the machine, and two running at once lock and delete each other's stores.
     */
    private static final String STATE_DIR = stateDir();

    private Runner() {}

    private static String stateDir() {
        try {
            java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("streamkit-oracle-");
            dir.toFile().deleteOnExit();
            return dir.toString();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException("cannot create the oracle's state directory", e);
        }
    }

    static Properties props() {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "oracle");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:9");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        p.put(StreamsConfig.STATE_DIR_CONFIG, STATE_DIR);
        // Emit-on-close windows and outer joins' unmatched records are throttled by the wall
        // clock (1 s by default), which TopologyTestDriver does not move: emit on every record.
        p.put("__emit.interval.ms.kstreams.windowed.aggregation__", 0L);
        p.put("__emit.interval.ms.kstreams.outer.join.spurious.results.fix__", 0L);
        return p;
    }

    public static ObjectNode run(JsonNode c) {
        ObjectNode answer = F.objectNode();
        answer.set("id", c.get("id"));
        JsonNode spec = c.get("spec");
        JsonNode records = c.get("records");
        if (spec == null || !spec.isObject() || records == null || !records.isArray()) {
            answer.put("error", "a case is {\"id\": ..., \"spec\": {...}, \"records\": [[topic, key, value, ts], ...]}");
            return answer;
        }
        Topologies.Built built;
        try {
            built = Topologies.build(spec);
        } catch (RuntimeException e) {
            answer.put("error", firstLine("spec: " + e.getMessage()));
            return answer;
        }
        try (TopologyTestDriver driver = new TopologyTestDriver(built.topology, props(), Instant.ofEpochMilli(START_MS))) {
            Map<String, TestInputTopic<String, JsonNode>> inputs = new HashMap<>();
            TestOutputTopic<JsonNode, JsonNode> out = driver.createOutputTopic(Topologies.OUT, J.deserializer(), J.deserializer());
            ArrayNode written = F.arrayNode();
            for (JsonNode r : records) {
                if (!r.isArray() || r.size() != 4 || !r.get(0).isTextual() || !r.get(1).isTextual() || !r.get(3).canConvertToLong()) {
                    answer.put("error", "a record is [topic, key, value or null, timestamp ms], not " + r);
                    return answer;
                }
                String topic = r.get(0).asText();
                TestInputTopic<String, JsonNode> in = inputs.computeIfAbsent(
                    topic, t -> driver.createInputTopic(t, S.serializer(), J.serializer()));
                JsonNode value = r.get(2).isNull() ? null : r.get(2);
                in.pipeInput(new TestRecord<>(r.get(1).asText(), value, Instant.ofEpochMilli(r.get(3).asLong())));
                for (TestRecord<JsonNode, JsonNode> o : out.readRecordsToList()) {
                    ArrayNode row = F.arrayNode();
                    row.add(Topologies.OUT);
                    row.add(o.key());
                    row.add(o.value() == null ? F.nullNode() : o.value());
                    row.add(o.timestamp());
                    written.add(row);
                }
            }
            answer.set("out", written);
            ObjectNode stores = F.objectNode();
            for (Map.Entry<String, String> store : built.stores.entrySet()) {
                stores.set(store.getKey(), contents(driver, store.getKey(), store.getValue()));
            }
            answer.set("stores", stores);
            answer.put("dropped", dropped(driver));
        } catch (RuntimeException e) {
            Throwable root = e;
            while (root.getCause() != null) {
                root = root.getCause();
            }
            answer.put("error", firstLine(e.getClass().getSimpleName() + ": " + e.getMessage() + " (" + root + ")"));
        }
        return answer;
    }

    static String firstLine(String message) {
        return message.split("\n", 2)[0];
    }

    private static JsonNode json(Object value) {
        return value == null ? F.nullNode() : JsonSerde.MAPPER.valueToTree(value);
    }

    private static ArrayNode contents(TopologyTestDriver driver, String name, String kind) {
        ArrayNode rows = F.arrayNode();
        switch (kind) {
            case "kv": {
                try (KeyValueIterator<Object, Object> it = driver.getKeyValueStore(name).all()) {
                    while (it.hasNext()) {
                        KeyValue<Object, Object> kv = it.next();
                        rows.add(F.arrayNode().add(json(kv.key)).add(json(kv.value)));
                    }
                }
                return rows;
            }
            case "window": {
                try (KeyValueIterator<Windowed<Object>, Object> it = driver.getWindowStore(name).all()) {
                    while (it.hasNext()) {
                        KeyValue<Windowed<Object>, Object> kv = it.next();
                        rows.add(F.arrayNode().add(windowKey(kv.key)).add(json(kv.value)));
                    }
                }
                return rows;
            }
            case "session": {
                try (KeyValueIterator<Windowed<Object>, Object> it = driver.getSessionStore(name).fetch(null, null)) {
                    while (it.hasNext()) {
                        KeyValue<Windowed<Object>, Object> kv = it.next();
                        rows.add(F.arrayNode().add(windowKey(kv.key)).add(json(kv.value)));
                    }
                }
                return rows;
            }
            default: throw new IllegalStateException("no store kind " + kind);
        }
    }

    private static ArrayNode windowKey(Windowed<Object> w) {
        return F.arrayNode().add(json(w.key())).add(w.window().start()).add(w.window().end());
    }

    /** The task's dropped-records-total: late records, and records a processor skipped. */
    private static double dropped(TopologyTestDriver driver) {
        double total = 0;
        for (Map.Entry<MetricName, ? extends Metric> m : driver.metrics().entrySet()) {
            if (m.getKey().name().equals("dropped-records-total") && m.getKey().group().equals("stream-task-metrics")) {
                Object v = m.getValue().metricValue();
                if (v instanceof Number) {
                    total += ((Number) v).doubleValue();
                }
            }
        }
        return total;
    }
}
