package io.streamkit.interop.peer;

import java.time.Duration;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * The tumbling windowed count peer: input records keyed by word, counted per
 * {@code --window-ms} tumbling window (event time: the records' timestamps, no grace), every
 * update written as key {@code word@windowStart} and a decimal count. Usage: see {@link PeerArgs}.
 */
public final class WindowedCount {
    private WindowedCount() {}

    public static void main(String[] argv) throws InterruptedException {
        PeerRunner.run(argv, (builder, inputs, args) -> inputs.stream(args.input)
            .groupByKey()
            .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(args.windowMs)))
            .count(Materialized.as("windowed-counts"))
            .toStream((window, count) -> window.key() + "@" + window.window().start())
            .mapValues(count -> Long.toString(count))
            .to(args.output, Produced.with(Serdes.String(), Serdes.String())));
    }
}
