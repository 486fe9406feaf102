package example;

import java.util.Map;

/** Throws from a helper the handler calls. */
public class Fails {
    public Object handleRequest(Map<String, Object> event) {
        return explode(String.valueOf(event.get("why")));
    }

    private static Object explode(String why) {
        throw new IllegalStateException("boom: " + why);
    }
}
