package example.spring;

import org.springframework.boot.autoconfigure.SpringBootApplication;

/** The application: component scan of this package, Boot's auto-configuration. */
@SpringBootApplication
public class App {}
