package example.spring;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.springframework.stereotype.Service;

/** A bean with a dependency Boot configures (its ObjectMapper). */
@Service
public class Greeter {
    private final ObjectMapper mapper;

    public Greeter(ObjectMapper mapper) {
        this.mapper = mapper;
    }

    public String greet(String name) throws Exception {
        return mapper.writeValueAsString("Hello, " + name + "!");
    }
}
