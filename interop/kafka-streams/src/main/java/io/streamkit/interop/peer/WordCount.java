package io.streamkit.interop.peer;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * The word count peer: input records keyed by word, {@code groupByKey().count()} in a RocksDB
 * store (with its changelog), every count update written to the output topic as (word, decimal
 * count); with {@code --emit none} nothing is written downstream: the table and its changelog
 * only, as a streamkit agent counting into a table does. Usage: see {@link PeerArgs}.
 */
public final class WordCount {
    private WordCount() {}

    public static void main(String[] argv) throws InterruptedException {
        PeerRunner.run(argv, (builder, inputs, args) -> {
            if (args.emit.equals("close")) {
                throw new IllegalArgumentException("--emit close is for the windowed count; the word count emits update or none");
            }
            KTable<String, Long> counts = inputs.stream(args.input)
                .groupByKey()
                .count(Materialized.as("word-counts"));
            if (args.emit.equals("update")) {
                counts.toStream()
                    .mapValues(count -> Long.toString(count))
                    .to(args.output, Produced.with(Serdes.String(), Serdes.String()));
            }
        });
    }
}
