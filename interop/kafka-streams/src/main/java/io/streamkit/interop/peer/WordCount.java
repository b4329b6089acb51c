package io.streamkit.interop.peer;

import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.common.serialization.Serdes;

/**
 * The word count peer: input records keyed by word, {@code groupByKey().count()} in a RocksDB
 * store, every count update written to the output topic as (word, decimal count).
 * Usage: see {@link PeerArgs}.
 */
public final class WordCount {
    private WordCount() {}

    public static void main(String[] argv) throws InterruptedException {
        PeerRunner.run(argv, (builder, inputs, args) -> inputs.stream(args.input)
            .groupByKey()
            .count(Materialized.as("word-counts"))
            .toStream()
            .mapValues(count -> Long.toString(count))
            .to(args.output, Produced.with(Serdes.String(), Serdes.String())));
    }
}
