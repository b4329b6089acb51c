package io.streamkit.interop;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.streamkit.interop.oracle.JsonSerde;
import io.streamkit.interop.oracle.Runner;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/**
 * Kafka Streams as the oracle of streamkit's semantics: reads one case per line (JSON) on
 * stdin, runs each in a fresh TopologyTestDriver, and writes one answer per line on stdout,
 * flushed, so it serves a batch piped in at once and a caller that sends a case and waits
 * for its answer alike. The case format is documented in tests/interop/kstreams.py.
 */
public final class Oracle {
    private Oracle() {}

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode answer;
            try {
                JsonNode c = JsonSerde.MAPPER.readTree(line);
                answer = Runner.run(c);
            } catch (Exception e) {
                answer = JsonNodeFactory.instance.objectNode();
                answer.put("error", "not a JSON case: " + e.getMessage().split("\n")[0]);
            }
            out.println(JsonSerde.MAPPER.writeValueAsString(answer));
            out.flush();
        }
    }
}
