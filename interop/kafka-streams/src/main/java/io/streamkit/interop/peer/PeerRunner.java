package io.streamkit.interop.peer;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse;
import org.apache.kafka.streams.kstream.KStream;

/**
 * Runs one peer topology: prints {@code RUNNING} once the application first reaches that
 * state, counts the input records its topology saw, and closes (committing its last work)
 * when it has seen {@code --records} of them, on SIGTERM, or when it fails. The last line it
 * prints is {@code processed N}; the exit code is 0 unless the application died with an error
 * (1) or the arguments were bad (2).
 */
final class PeerRunner {
    private PeerRunner() {}

    interface Topology {
        /** Builds the topology; {@code inputs} opens an input topic whose records are counted. */
        void build(StreamsBuilder builder, Inputs inputs, PeerArgs args);
    }

    interface Inputs {
        KStream<String, String> stream(String topic);
    }

    static void run(String[] argv, Topology topology) throws InterruptedException {
        AtomicLong processed = new AtomicLong();
        CountDownLatch done = new CountDownLatch(1);
        StreamsBuilder builder = new StreamsBuilder();
        PeerArgs args;
        try {
            args = PeerArgs.parse(argv);
            long records = args.records;
            topology.build(builder, topic -> builder.<String, String>stream(topic).peek((k, v) -> {
                if (processed.incrementAndGet() == records) {
                    done.countDown();
                }
            }), args);
        } catch (IllegalArgumentException e) {
            System.err.println("peer: " + e.getMessage());
            System.exit(2);
            return;
        }
        KafkaStreams streams = new KafkaStreams(builder.build(), args.streamsConfig());
        AtomicLong failed = new AtomicLong();
        streams.setUncaughtExceptionHandler(exception -> {
            System.err.println("peer: the stream thread failed: " + exception);
            exception.printStackTrace(System.err);
            failed.set(1);
            done.countDown();
            return StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && before == KafkaStreams.State.REBALANCING
                    && failed.get() == 0 && !printedRunning) {
                printedRunning = true;
                System.out.println("RUNNING");
                System.out.flush();
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.PENDING_ERROR) {
                failed.set(1);
                done.countDown();
            }
        });
        // On SIGTERM the JVM halts once its shutdown hooks return: this one holds it until
        // the application is closed (its work committed) and the last line printed.
        AtomicBoolean terminated = new AtomicBoolean();
        CountDownLatch finished = new CountDownLatch(1);
        Thread hook = new Thread(() -> {
            terminated.set(true);
            done.countDown();
            try {
                finished.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "peer-sigterm");
        Runtime.getRuntime().addShutdownHook(hook);
        streams.start();
        done.await();
        streams.close(Duration.ofSeconds(60));
        System.out.println("processed " + processed.get());
        System.out.flush();
        int code = (int) failed.get();
        if (!terminated.get()) {
            try {
                Runtime.getRuntime().removeShutdownHook(hook);
                System.exit(code);
            } catch (IllegalStateException shuttingDown) {
                // SIGTERM arrived meanwhile: end as below
            }
        }
        // A stop asked for and done is a clean exit, not 143: halt while the hook still holds
        // the shutdown (once it returned, the JVM would exit with 143 before this line ran).
        Runtime.getRuntime().halt(code);
    }

    private static volatile boolean printedRunning;
}
