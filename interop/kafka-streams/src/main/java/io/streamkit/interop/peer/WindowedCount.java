package io.streamkit.interop.peer;

import java.time.Duration;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.WindowStore;

/**
 * The tumbling windowed count peer: input records keyed by word, counted per
 * {@code --window-ms} tumbling window (event time: the records' timestamps, no grace), written
 * as key {@code word@windowStart} and a decimal count: every update ({@code --emit update}, the
 * default), or each window once when stream time passes its end ({@code --emit close}:
 * {@code suppress(untilWindowCloses)}, as streamkit's {@code to_stream(emit="close")}; an
 * unbounded buffer, so nothing is emitted early). Usage: see {@link PeerArgs}.
 */
public final class WindowedCount {
    private WindowedCount() {}

    public static void main(String[] argv) throws InterruptedException {
        PeerRunner.run(argv, (builder, inputs, args) -> {
            KTable<Windowed<String>, Long> counts = inputs.stream(args.input)
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(args.windowMs)))
                // Serdes named: suppression's buffer serializes the windowed key with the
                // table's own key serde, which the default (String) serde cannot be
                .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("windowed-counts")
                    .withKeySerde(Serdes.String())
                    .withValueSerde(Serdes.Long()));
            if (args.emit.equals("none")) {
                throw new IllegalArgumentException("--emit none is for the word count; the windowed count emits update or close");
            }
            if (args.emit.equals("close")) {
                counts = counts.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
            }
            counts.toStream((window, count) -> window.key() + "@" + window.window().start())
                .mapValues(count -> Long.toString(count))
                .to(args.output, Produced.with(Serdes.String(), Serdes.String()));
        });
    }
}
