package example;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.crac.Context;
import org.crac.Core;
import org.crac.Resource;

/**
 * Three CRaC resources registered at init; each hook call is recorded.
 * `fail` in the environment makes one hook throw: FAIL=before or FAIL=after.
 */
public class Hooks {
    static final List<String> EVENTS = new ArrayList<>();
    // org.crac holds resources weakly: the function keeps them
    private final List<Resource> resources = new ArrayList<>();

    public Hooks() {
        for (String name : new String[] {"a", "b", "c"}) {
            Resource r = new Resource() {
                @Override
                public void beforeCheckpoint(Context<? extends Resource> c) {
                    EVENTS.add("before " + name);
                    if (name.equals("b") && "before".equals(System.getenv("FAIL"))) {
                        throw new IllegalStateException("resource b refuses the snapshot");
                    }
                }

                @Override
                public void afterRestore(Context<? extends Resource> c) {
                    EVENTS.add("after " + name);
                    if (name.equals("b") && "after".equals(System.getenv("FAIL"))) {
                        throw new IllegalStateException("resource b cannot come back");
                    }
                }
            };
            resources.add(r);
            Core.getGlobalContext().register(r);
        }
    }

    public Map<String, Object> handleRequest(Map<String, Object> event) {
        synchronized (EVENTS) {
            return Map.of("events", new ArrayList<>(EVENTS));
        }
    }
}
