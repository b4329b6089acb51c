package io.streamkit.interop.kafka;

import org.apache.kafka.common.utils.internals.AppInfoParser;

/** Prints the Kafka version on the class path: the build's smoke check. */
public final class Version {
    private Version() {}

    public static void main(String[] args) {
        System.out.println(AppInfoParser.getVersion());
    }
}
