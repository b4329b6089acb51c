package io.streamkit.interop.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.IntNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.TextNode;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.streams.KeyValue;

/**
 * The functions of tests/dsl/pipeline_spec.py, by the same kind and name, over JSON values
 * (an int or null) and String keys. Each answers exactly what its Python twin answers.
 */
public final class Menus {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;

    private Menus() {}

    /** Python's ``_num``: 0 for None. */
    public static int num(JsonNode v) {
        return v == null || v.isNull() ? 0 : v.asInt();
    }

    private static boolean none(JsonNode v) {
        return v == null || v.isNull();
    }

    private static String first(String k) {
        return k.isEmpty() ? k : k.substring(0, 1);
    }

    public static boolean filter(String name, JsonNode v) {
        switch (name) {
            case "even": return !none(v) && v.asInt() % 2 == 0;
            case "not_none": return !none(v);
            case "small": return none(v) || v.asInt() < 6;
            default: throw new IllegalArgumentException("no filter named '" + name + "'");
        }
    }

    public static JsonNode mapValues(String name, JsonNode v) {
        switch (name) {
            case "inc": return none(v) ? null : IntNode.valueOf(v.asInt() + 1);
            case "halve": return none(v) ? null : IntNode.valueOf(Math.floorDiv(v.asInt(), 2));
            default: throw new IllegalArgumentException("no map_values named '" + name + "'");
        }
    }

    public static KeyValue<String, JsonNode> map(String name, String k, JsonNode v) {
        switch (name) {
            case "first": return KeyValue.pair(first(k), v);
            case "by_value": return KeyValue.pair(none(v) ? k : "v" + Math.floorMod(v.asInt(), 3), v);
            default: throw new IllegalArgumentException("no map named '" + name + "'");
        }
    }

    public static List<KeyValue<String, JsonNode>> flatMap(String name, String k, JsonNode v) {
        List<KeyValue<String, JsonNode>> out = new ArrayList<>();
        switch (name) {
            case "fan":
                out.add(KeyValue.pair(k, v));
                out.add(KeyValue.pair(first(k), v));
                return out;
            case "drop_none":
                if (!none(v)) {
                    out.add(KeyValue.pair(k, v));
                }
                return out;
            default: throw new IllegalArgumentException("no flat_map named '" + name + "'");
        }
    }

    public static List<JsonNode> flatMapValues(String name, JsonNode v) {
        List<JsonNode> out = new ArrayList<>();
        switch (name) {
            case "twice":
                out.add(v);
                out.add(v);
                return out;
            case "upto":
                if (!none(v)) {
                    for (int i = 0; i < Math.floorMod(v.asInt(), 3); i++) {
                        out.add(v);
                    }
                }
                return out;
            default: throw new IllegalArgumentException("no flat_map_values named '" + name + "'");
        }
    }

    /** GROUP_BY (also the global-table join's key mapper, over the value). */
    public static String groupBy(String name, JsonNode v) {
        switch (name) {
            case "parity": return none(v) ? "none" : (v.asInt() % 2 == 0 ? "even" : "odd");
            case "mod3": return none(v) ? "m" : "m" + Math.floorMod(v.asInt(), 3);
            default: throw new IllegalArgumentException("no group_by named '" + name + "'");
        }
    }

    public static JsonNode reduce(String name, JsonNode a, JsonNode b) {
        switch (name) {
            case "add": return IntNode.valueOf(num(a) + num(b));
            case "digits": return IntNode.valueOf(Math.floorMod(num(a) * 3 + num(b), 1000));
            default: throw new IllegalArgumentException("no reducer named '" + name + "'");
        }
    }

    public static JsonNode init(String name) {
        switch (name) {
            case "add": return IntNode.valueOf(0);
            case "append": return F.arrayNode();
            default: throw new IllegalArgumentException("no aggregator named '" + name + "'");
        }
    }

    public static JsonNode add(String name, JsonNode v, JsonNode agg) {
        switch (name) {
            case "add": return IntNode.valueOf(agg.asInt() + num(v));
            case "append": {
                ArrayNode out = ((ArrayNode) agg).deepCopy();
                out.add(none(v) ? F.nullNode() : v);
                return out;
            }
            default: throw new IllegalArgumentException("no aggregator named '" + name + "'");
        }
    }

    public static JsonNode merge(String name, JsonNode a, JsonNode b) {
        switch (name) {
            case "add": return IntNode.valueOf(a.asInt() + b.asInt());
            case "append": {
                ArrayNode out = ((ArrayNode) a).deepCopy();
                out.addAll((ArrayNode) b);
                return out;
            }
            default: throw new IllegalArgumentException("no aggregator named '" + name + "'");
        }
    }

    /** SUMS: "plain" adds the value, "or0" adds _num(value). */
    public static JsonNode sum(String name, JsonNode v, JsonNode agg) {
        switch (name) {
            case "plain":
            case "or0":
                return IntNode.valueOf(agg.asInt() + num(v));
            default: throw new IllegalArgumentException("no sum named '" + name + "'");
        }
    }

    /** STREAM_MENUS' filter: "present". */
    public static boolean streamFilter(String name, JsonNode v) {
        if (!name.equals("present")) {
            throw new IllegalArgumentException("no stream filter named '" + name + "'");
        }
        return !none(v);
    }

    /** STREAM_MENUS' map "first": the (group) key's first character. */
    public static JsonNode streamMapKey(String name, JsonNode key) {
        if (!name.equals("first")) {
            throw new IllegalArgumentException("no stream map named '" + name + "'");
        }
        if (key.isArray()) {
            ArrayNode out = ((ArrayNode) key).deepCopy();
            out.set(0, TextNode.valueOf(first(key.get(0).asText())));
            return out;
        }
        return TextNode.valueOf(first(key.asText()));
    }

    /** The joiners' one value: [left, right], a missing side as null. */
    public static JsonNode pair(JsonNode left, JsonNode right) {
        ArrayNode out = F.arrayNode();
        out.add(left == null ? F.nullNode() : left);
        out.add(right == null ? F.nullNode() : right);
        return out;
    }
}
