package io.streamkit.interop.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;

/** Values (and windowed output keys) as JSON; a null value stays a null record value (a tombstone). */
public final class JsonSerde {
    public static final ObjectMapper MAPPER = new ObjectMapper();

    private JsonSerde() {}

    public static Serde<JsonNode> serde() {
        Serializer<JsonNode> ser = (topic, node) -> {
            if (node == null) {
                return null;
            }
            try {
                return MAPPER.writeValueAsBytes(node);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        };
        Deserializer<JsonNode> de = (topic, bytes) -> {
            if (bytes == null) {
                return null;
            }
            try {
                return MAPPER.readTree(bytes);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        };
        return Serdes.serdeFrom(ser, de);
    }

    /** String keys written as JSON strings, so every output key reads back as JSON. */
    public static Serde<String> stringAsJson() {
        Serializer<String> ser = (topic, key) -> {
            try {
                return key == null ? null : MAPPER.writeValueAsBytes(key);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        };
        Deserializer<String> de = (topic, bytes) -> {
            try {
                return bytes == null ? null : MAPPER.readValue(bytes, String.class);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        };
        return Serdes.serdeFrom(ser, de);
    }
}
