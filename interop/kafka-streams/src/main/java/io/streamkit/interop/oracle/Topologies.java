package io.streamkit.interop.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.LongNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * Builds the Kafka Streams topology a case's spec names (the format is documented in
 * tests/interop/kstreams.py): the source topic "events" (joins: "left" and "right"), the
 * output topic "out", the result store "result". Durations are milliseconds.
 */
public final class Topologies {
    public static final String SOURCE = "events";
    public static final String OUT = "out";
    public static final String TABLE = "result";

    private static final Serde<String> S = Serdes.String();
    private static final Serde<JsonNode> J = JsonSerde.serde();
    private static final JsonNodeFactory F = JsonNodeFactory.instance;

    /** A built topology and its stores: name -> "kv", "window" or "session". */
    public static final class Built {
        public final Topology topology;
        public final Map<String, String> stores;

        Built(Topology topology, Map<String, String> stores) {
            this.topology = topology;
            this.stores = stores;
        }
    }

    private Topologies() {}

    public static Built build(JsonNode spec) {
        StreamsBuilder builder = new StreamsBuilder();
        Map<String, String> stores = new LinkedHashMap<>();
        if (spec.has("join")) {
            join(builder, spec, stores);
        } else if (spec.has("table_ops")) {
            tableOps(builder, spec, stores);
        } else if (spec.has("agg")) {
            pipeline(builder, spec, stores);
        } else {
            throw new IllegalArgumentException("a spec has 'agg' (a pipeline), 'join' or 'table_ops'");
        }
        return new Built(builder.build(), stores);
    }

    private static <V> Materialized<String, V, KeyValueStore<Bytes, byte[]>> kv(String name, Serde<V> values) {
        return Materialized.<String, V, KeyValueStore<Bytes, byte[]>>as(name).withKeySerde(S).withValueSerde(values);
    }

    private static String text(JsonNode node, String what) {
        if (node == null || !node.isTextual()) {
            throw new IllegalArgumentException(what + " must be a string");
        }
        return node.asText();
    }

    // -- pipelines (tests/dsl/pipeline_spec.py) ------------------------------------------------

    private static void pipeline(StreamsBuilder builder, JsonNode spec, Map<String, String> stores) {
        KStream<String, JsonNode> stream = builder.stream(SOURCE, Consumed.with(S, J));
        for (JsonNode op : spec.path("before")) {
            String kind = text(op.get(0), "an operator's kind");
            String name = text(op.get(1), "an operator's name");
            switch (kind) {
                case "filter": stream = stream.filter((k, v) -> Menus.filter(name, v)); break;
                case "map_values": stream = stream.mapValues(v -> Menus.mapValues(name, v)); break;
                case "map": stream = stream.map((k, v) -> Menus.map(name, k, v)); break;
                case "flat_map": stream = stream.flatMap((k, v) -> Menus.flatMap(name, k, v)); break;
                case "flat_map_values": stream = stream.flatMapValues(v -> Menus.flatMapValues(name, v)); break;
                default: throw new IllegalArgumentException("no operator kind '" + kind + "'");
            }
        }
        String aggKind = text(spec.path("agg").get(0), "agg's kind");
        String aggName = spec.path("agg").path(1).asText("");
        JsonNode group = spec.get("group");
        JsonNode window = spec.get("window");
        JsonNode out = spec.get("stream");
        if (group == null || group.isNull()) {
            if (!aggKind.equals("latest") || (window != null && !window.isNull())) {
                throw new IllegalArgumentException("no group: the pipeline is to_table (agg 'latest', no window)");
            }
            stores.put(TABLE, "kv");
            KTable<String, JsonNode> table = stream.toTable(kv(TABLE, J));
            if (out != null && !out.isNull()) {
                emit(table.toStream().map((k, v) -> KeyValue.pair((JsonNode) TextNode.valueOf(k), v)), out);
            }
            return;
        }
        KGroupedStream<String, JsonNode> grouped;
        if (group.get(0).asText().equals("key")) {
            grouped = stream.groupByKey(Grouped.with(S, J));
        } else {
            String by = text(group.get(1), "group_by's name");
            grouped = stream.groupBy((k, v) -> Menus.groupBy(by, v), Grouped.with(S, J));
        }
        if (window != null && !window.isNull()) {
            windowed(grouped, window, aggKind, aggName, out, stores, spec.path("retention_ms").asLong(0));
            return;
        }
        stores.put(TABLE, "kv");
        KTable<String, JsonNode> table;
        switch (aggKind) {
            case "count":
                table = grouped.count(kv(TABLE, Serdes.Long())).mapValues(c -> (JsonNode) LongNode.valueOf(c));
                break;
            case "sum":
                table = grouped.aggregate(() -> LongNode.valueOf(0), (k, v, agg) -> Menus.sum(aggName, v, agg), kv(TABLE, J));
                break;
            case "reduce":
                table = grouped.reduce((a, b) -> Menus.reduce(aggName, a, b), kv(TABLE, J));
                break;
            case "aggregate":
                table = grouped.aggregate(() -> Menus.init(aggName), (k, v, agg) -> Menus.add(aggName, v, agg), kv(TABLE, J));
                break;
            default: throw new IllegalArgumentException("no agg kind '" + aggKind + "'");
        }
        if (out != null && !out.isNull()) {
            emit(table.toStream().map((k, v) -> KeyValue.pair((JsonNode) TextNode.valueOf(k), v)), out);
        }
    }

    private static long ms(JsonNode window, int i) {
        JsonNode n = window.get(i);
        if (n == null || !n.canConvertToLong()) {
            throw new IllegalArgumentException("window " + window + " needs integer milliseconds at position " + i);
        }
        return n.asLong();
    }

    private static void windowed(KGroupedStream<String, JsonNode> grouped, JsonNode window, String aggKind,
                                 String aggName, JsonNode out, Map<String, String> stores, long retentionMs) {
        String kind = text(window.get(0), "a window's kind");
        boolean onClose = out != null && !out.isNull() && out.path("emit").asText("update").equals("close");
        // streamkit's to_stream(emit="close") is Kafka Streams' suppress(untilWindowCloses): a
        // window is emitted once stream time reaches its end + grace, and again when a record
        // still lands in it (sliding). "close_by": "emit_strategy" asks for
        // emitStrategy(onWindowClose) instead, which closes one millisecond later (see
        // docs/kafka-streams.md).
        boolean byStrategy = onClose && out.path("close_by").asText("suppress").equals("emit_strategy");
        EmitStrategy emit = byStrategy ? EmitStrategy.onWindowClose() : EmitStrategy.onWindowUpdate();
        KTable<Windowed<String>, JsonNode> table;
        if (kind.equals("session")) {
            stores.put(TABLE, "session");
            SessionWindows windows = SessionWindows.ofInactivityGapAndGrace(
                Duration.ofMillis(ms(window, 1)), Duration.ofMillis(ms(window, 2)));
            var ws = grouped.windowedBy(windows).emitStrategy(emit);
            Materialized<String, JsonNode, SessionStore<Bytes, byte[]>> m =
                Materialized.<String, JsonNode, SessionStore<Bytes, byte[]>>as(TABLE).withKeySerde(S).withValueSerde(J);
            if (retentionMs > 0) {
                m = m.withRetention(Duration.ofMillis(retentionMs));
            }
            switch (aggKind) {
                case "count":
                    table = ws.aggregate(() -> LongNode.valueOf(0), (k, v, agg) -> LongNode.valueOf(agg.asLong() + 1),
                        (k, a, b) -> LongNode.valueOf(a.asLong() + b.asLong()), m);
                    break;
                case "reduce":
                    table = ws.reduce((a, b) -> Menus.reduce(aggName, a, b), m);
                    break;
                case "aggregate":
                    table = ws.aggregate(() -> Menus.init(aggName), (k, v, agg) -> Menus.add(aggName, v, agg),
                        (k, a, b) -> Menus.merge(aggName, a, b), m);
                    break;
                default: throw new IllegalArgumentException("no windowed agg kind '" + aggKind + "'");
            }
        } else {
            stores.put(TABLE, "window");
            Materialized<String, JsonNode, WindowStore<Bytes, byte[]>> m =
                Materialized.<String, JsonNode, WindowStore<Bytes, byte[]>>as(TABLE).withKeySerde(S).withValueSerde(J);
            if (retentionMs > 0) {
                m = m.withRetention(Duration.ofMillis(retentionMs));
            }
            if (kind.equals("sliding")) {
                var ws = grouped.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(
                    Duration.ofMillis(ms(window, 1)), Duration.ofMillis(ms(window, 2)))).emitStrategy(emit);
                table = timeAgg(aggKind, aggName, ws::aggregate, ws::reduce, m);
            } else {
                TimeWindows windows;
                if (kind.equals("tumbling")) {
                    windows = TimeWindows.ofSizeAndGrace(Duration.ofMillis(ms(window, 1)), Duration.ofMillis(ms(window, 2)));
                } else if (kind.equals("hopping")) {
                    windows = TimeWindows.ofSizeAndGrace(Duration.ofMillis(ms(window, 1)), Duration.ofMillis(ms(window, 3)))
                        .advanceBy(Duration.ofMillis(ms(window, 2)));
                } else {
                    throw new IllegalArgumentException("no window kind '" + kind + "'");
                }
                var ws = grouped.windowedBy(windows).emitStrategy(emit);
                table = timeAgg(aggKind, aggName, ws::aggregate, ws::reduce, m);
            }
        }
        if (out != null && !out.isNull()) {
            KTable<Windowed<String>, JsonNode> emitted = onClose && !byStrategy
                ? table.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                : table;
            emit(emitted.toStream().map((w, v) -> KeyValue.pair(windowKey(w), v)), out);
        }
    }

    /** The aggregate(initializer, aggregator, materialized) of a time- or sliding-windowed stream. */
    @FunctionalInterface
    interface TimeAggregate {
        KTable<Windowed<String>, JsonNode> apply(
            org.apache.kafka.streams.kstream.Initializer<JsonNode> init,
            org.apache.kafka.streams.kstream.Aggregator<? super String, ? super JsonNode, JsonNode> add,
            Materialized<String, JsonNode, WindowStore<Bytes, byte[]>> m);
    }

    @FunctionalInterface
    interface TimeReduce {
        KTable<Windowed<String>, JsonNode> apply(
            org.apache.kafka.streams.kstream.Reducer<JsonNode> reducer,
            Materialized<String, JsonNode, WindowStore<Bytes, byte[]>> m);
    }

    private static KTable<Windowed<String>, JsonNode> timeAgg(String aggKind, String aggName, TimeAggregate aggregate,
                                                              TimeReduce reduce,
                                                              Materialized<String, JsonNode, WindowStore<Bytes, byte[]>> m) {
        switch (aggKind) {
            case "count":
                return aggregate.apply(() -> LongNode.valueOf(0), (k, v, agg) -> LongNode.valueOf(agg.asLong() + 1), m);
            case "reduce":
                return reduce.apply((a, b) -> Menus.reduce(aggName, a, b), m);
            case "aggregate":
                return aggregate.apply(() -> Menus.init(aggName), (k, v, agg) -> Menus.add(aggName, v, agg), m);
            default: throw new IllegalArgumentException("no windowed agg kind '" + aggKind + "'");
        }
    }

    /** Windowed<K> as the JSON [key, start, end] (Kafka Streams' own start and end). */
    public static JsonNode windowKey(Windowed<String> w) {
        ArrayNode key = F.arrayNode();
        key.add(w.key());
        key.add(w.window().start());
        key.add(w.window().end());
        return key;
    }

    /** A table's stream through the spec's STREAM_MENUS ops into "out". */
    private static void emit(KStream<JsonNode, JsonNode> changes, JsonNode out) {
        for (JsonNode op : out.path("ops")) {
            String kind = text(op.get(0), "a stream operator's kind");
            String name = text(op.get(1), "a stream operator's name");
            switch (kind) {
                case "filter": changes = changes.filter((k, v) -> Menus.streamFilter(name, v)); break;
                case "map": changes = changes.map((k, v) -> KeyValue.pair(Menus.streamMapKey(name, k), v)); break;
                default: throw new IllegalArgumentException("stream operator '" + kind + "' is not in the oracle");
            }
        }
        changes.to(OUT, Produced.with(J, J));
    }

    // -- joins ------------------------------------------------------------------------------

    private static void join(StreamsBuilder builder, JsonNode spec, Map<String, String> stores) {
        String kind = text(spec.get("join"), "join");
        String how = text(spec.get("how"), "how");
        switch (kind) {
            case "stream": {
                KStream<String, JsonNode> left = builder.stream("left", Consumed.with(S, J));
                KStream<String, JsonNode> right = builder.stream("right", Consumed.with(S, J));
                JoinWindows windows = JoinWindows.ofTimeDifferenceAndGrace(
                    Duration.ofMillis(spec.path("within_ms").asLong()), Duration.ofMillis(spec.path("grace_ms").asLong()));
                StreamJoined<String, JsonNode, JsonNode> with = StreamJoined.with(S, J, J);
                KStream<String, JsonNode> joined;
                switch (how) {
                    case "inner": joined = left.join(right, Menus::pair, windows, with); break;
                    case "left": joined = left.leftJoin(right, Menus::pair, windows, with); break;
                    case "outer": joined = left.outerJoin(right, Menus::pair, windows, with); break;
                    default: throw new IllegalArgumentException("a stream-stream join is inner, left or outer, not '" + how + "'");
                }
                joined.to(OUT, Produced.with(JsonSerde.stringAsJson(), J));
                return;
            }
            case "table": {
                KStream<String, JsonNode> left = builder.stream("left", Consumed.with(S, J));
                stores.put("right", "kv");
                KTable<String, JsonNode> right = builder.table("right", Consumed.with(S, J), kv("right", J));
                KStream<String, JsonNode> joined;
                switch (how) {
                    case "inner": joined = left.join(right, Menus::pair); break;
                    case "left": joined = left.leftJoin(right, Menus::pair); break;
                    default: throw new IllegalArgumentException("a stream-table join is inner or left, not '" + how + "'");
                }
                joined.to(OUT, Produced.with(JsonSerde.stringAsJson(), J));
                return;
            }
            case "global": {
                KStream<String, JsonNode> left = builder.stream("left", Consumed.with(S, J));
                stores.put("right", "kv");
                GlobalKTable<String, JsonNode> right = builder.globalTable("right", Consumed.with(S, J), kv("right", J));
                String mapper = text(spec.get("key"), "key");
                KStream<String, JsonNode> joined;
                switch (how) {
                    case "inner": joined = left.join(right, (k, v) -> Menus.groupBy(mapper, v), Menus::pair); break;
                    case "left": joined = left.leftJoin(right, (k, v) -> Menus.groupBy(mapper, v), Menus::pair); break;
                    default: throw new IllegalArgumentException("a stream-global-table join is inner or left, not '" + how + "'");
                }
                joined.to(OUT, Produced.with(JsonSerde.stringAsJson(), J));
                return;
            }
            case "table_table": {
                stores.put("left", "kv");
                stores.put("right", "kv");
                stores.put(TABLE, "kv");
                KTable<String, JsonNode> left = builder.table("left", Consumed.with(S, J), kv("left", J));
                KTable<String, JsonNode> right = builder.table("right", Consumed.with(S, J), kv("right", J));
                KTable<String, JsonNode> joined;
                switch (how) {
                    case "inner": joined = left.join(right, Menus::pair, kv(TABLE, J)); break;
                    case "left": joined = left.leftJoin(right, Menus::pair, kv(TABLE, J)); break;
                    case "outer": joined = left.outerJoin(right, Menus::pair, kv(TABLE, J)); break;
                    default: throw new IllegalArgumentException("a table-table join is inner, left or outer, not '" + how + "'");
                }
                joined.toStream().to(OUT, Produced.with(JsonSerde.stringAsJson(), J));
                return;
            }
            default: throw new IllegalArgumentException("join is stream, table, global or table_table, not '" + kind + "'");
        }
    }

    // -- table operators ----------------------------------------------------------------------

    private static void tableOps(StreamsBuilder builder, JsonNode spec, Map<String, String> stores) {
        stores.put("source", "kv");
        KTable<String, JsonNode> table = builder.table(SOURCE, Consumed.with(S, J), kv("source", J));
        JsonNode ops = spec.get("table_ops");
        if (ops.size() == 0) {
            throw new IllegalArgumentException("table_ops needs at least one operator");
        }
        for (int i = 0; i < ops.size(); i++) {
            String kind = text(ops.get(i).get(0), "a table operator's kind");
            String name = text(ops.get(i).get(1), "a table operator's name");
            String store = i == ops.size() - 1 ? TABLE : "op" + i;
            stores.put(store, "kv");
            switch (kind) {
                case "filter": table = table.filter((k, v) -> Menus.filter(name, v), kv(store, J)); break;
                case "map_values": table = table.mapValues(v -> Menus.mapValues(name, v), kv(store, J)); break;
                default: throw new IllegalArgumentException("a table operator is filter or map_values, not '" + kind + "'");
            }
        }
        table.toStream().to(OUT, Produced.with(JsonSerde.stringAsJson(), J));
    }
}
