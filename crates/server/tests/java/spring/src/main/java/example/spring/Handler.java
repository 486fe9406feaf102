package example.spring;

import com.amazonaws.services.lambda.runtime.Context;
import com.amazonaws.services.lambda.runtime.RequestHandler;
import java.util.Map;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

/** The function: the application context is started by the constructor (init). */
public class Handler implements RequestHandler<Map<String, String>, Map<String, Object>> {
    private final ConfigurableApplicationContext context;
    private final long startedMs;

    public Handler() {
        long t0 = System.nanoTime();
        context = new SpringApplicationBuilder(App.class)
                .web(WebApplicationType.NONE)
                .logStartupInfo(false)
                .run();
        startedMs = (System.nanoTime() - t0) / 1_000_000;
    }

    @Override
    public Map<String, Object> handleRequest(Map<String, String> event, Context lambda) {
        try {
            String name = event.getOrDefault("name", "world");
            return Map.of(
                    "greeting", context.getBean(Greeter.class).greet(name),
                    "beans", context.getBeanDefinitionCount(),
                    "started_ms", startedMs);
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }
}
