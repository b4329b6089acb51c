package io.streamkit.interop.peer;

import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsConfig;

/**
 * The command line every peer application shares: {@code --key value} pairs, each checked,
 * a bad one reported in one line (exit 2). Keys: bootstrap, application-id, input, output,
 * guarantee (at_least_once or exactly_once_v2), state-dir, commit-interval-ms, records (stop
 * after processing this many input records, of every input topic; 0: run until SIGTERM),
 * window-ms (the windowed count's window), emit (what a count writes to the output: update,
 * every change of a count; close, each window once when stream time closes it; none, nothing:
 * the table and its changelog only), right
 * (the join's second input), within-ms and grace-ms (the join's window each way and its grace).
 */
final class PeerArgs {
    final String bootstrap;
    final String applicationId;
    final String input;
    final String output;
    final String guarantee;
    final String stateDir;
    final long commitIntervalMs;
    final long records;
    final long windowMs;
    final String emit;
    final String right;
    final long withinMs;
    final long graceMs;

    private PeerArgs(Map<String, String> given) {
        bootstrap = required(given, "bootstrap");
        applicationId = required(given, "application-id");
        input = required(given, "input");
        output = required(given, "output");
        stateDir = required(given, "state-dir");
        guarantee = given.getOrDefault("guarantee", "at_least_once");
        if (!guarantee.equals(StreamsConfig.AT_LEAST_ONCE) && !guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2)) {
            throw new IllegalArgumentException("--guarantee must be at_least_once or exactly_once_v2, not " + guarantee);
        }
        commitIntervalMs = number(given, "commit-interval-ms", 1000);
        records = number(given, "records", 0);
        windowMs = number(given, "window-ms", 1000);
        emit = given.getOrDefault("emit", "update");
        if (!emit.equals("update") && !emit.equals("close") && !emit.equals("none")) {
            throw new IllegalArgumentException("--emit must be update, close or none, not " + emit);
        }
        right = given.getOrDefault("right", "");
        withinMs = number(given, "within-ms", 1000);
        graceMs = number(given, "grace-ms", 0);
    }

    static PeerArgs parse(String[] args) {
        Map<String, String> given = new HashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            if (!args[i].startsWith("--") || i + 1 >= args.length) {
                throw new IllegalArgumentException("arguments are --key value pairs; bad: " + args[i]);
            }
            given.put(args[i].substring(2), args[i + 1]);
        }
        return new PeerArgs(given);
    }

    /** One stream thread, String keys and values, the guarantee and commit interval asked for. */
    Properties streamsConfig() {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitIntervalMs);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        return props;
    }

    private static String required(Map<String, String> given, String key) {
        String value = given.get(key);
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("--" + key + " is required");
        }
        return value;
    }

    private static long number(Map<String, String> given, String key, long otherwise) {
        String value = given.get(key);
        if (value == null) {
            return otherwise;
        }
        try {
            long parsed = Long.parseLong(value);
            if (parsed < 0) {
                throw new NumberFormatException();
            }
            return parsed;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--" + key + " must be a whole number >= 0, not " + value);
        }
    }
}
