// java_hello: the helloworld of the suite in Java (Lambda's RequestHandler
// with Jackson-bound classes for the event and the answer); no actual work,
// the reference for the Java runtime's overheads.
import com.amazonaws.services.lambda.runtime.Context;
import com.amazonaws.services.lambda.runtime.RequestHandler;

public class java_hello implements RequestHandler<java_hello.Greeting, java_hello.Reply> {
    /** The event. */
    public static class Greeting {
        public String name;
    }

    /** The answer. */
    public static class Reply {
        public String message;
        public int length;
        public String function;
    }

    @Override
    public Reply handleRequest(Greeting event, Context context) {
        String name = event == null || event.name == null ? "World" : event.name;
        Reply r = new Reply();
        r.message = "Hello, " + name + "!";
        r.length = name.codePointCount(0, name.length());
        r.function = context.getFunctionName();
        return r;
    }
}
