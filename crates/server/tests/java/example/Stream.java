package example;

import com.amazonaws.services.lambda.runtime.Context;
import com.amazonaws.services.lambda.runtime.RequestStreamHandler;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

/** A RequestStreamHandler: the event's bytes upper-cased, as a JSON string. */
public class Stream implements RequestStreamHandler {
    @Override
    public void handleRequest(InputStream in, OutputStream out, Context context)
            throws IOException {
        String s = new String(in.readAllBytes(), StandardCharsets.UTF_8).toUpperCase();
        out.write(("\"" + s.replace("\"", "'") + "\"").getBytes(StandardCharsets.UTF_8));
    }
}
