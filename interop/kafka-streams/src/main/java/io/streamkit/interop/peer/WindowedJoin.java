package io.streamkit.interop.peer;

import java.time.Duration;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;

/**
 * The inner windowed join peer: {@code --input} (left) and {@code --right} records of one key
 * whose timestamps differ by at most {@code --within-ms} are joined, kept {@code --grace-ms}
 * past their window; each pair is written as (key, {@code left|right}). {@code --records}
 * counts the records of both inputs. Usage: see {@link PeerArgs}.
 */
public final class WindowedJoin {
    private WindowedJoin() {}

    public static void main(String[] argv) throws InterruptedException {
        PeerRunner.run(argv, (builder, inputs, args) -> {
            if (args.right.isEmpty()) {
                throw new IllegalArgumentException("--right is required");
            }
            JoinWindows window = JoinWindows.ofTimeDifferenceAndGrace(
                Duration.ofMillis(args.withinMs), Duration.ofMillis(args.graceMs));
            inputs.stream(args.input)
                .join(inputs.stream(args.right), (left, right) -> left + "|" + right, window,
                    StreamJoined.with(Serdes.String(), Serdes.String(), Serdes.String()))
                .to(args.output, Produced.with(Serdes.String(), Serdes.String()));
        });
    }
}
