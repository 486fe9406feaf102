package thaw;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.util.RawValue;
import java.io.EOFException;
import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.MalformedURLException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * thaw's in-sandbox agent for Java: serves one function over fd 3 with the
 * protocol of agent.py (docs/AGENT_PROTOCOL.md).
 *
 * <pre>
 *   java [flags] thaw.Agent FUNCTION   a suite function: classes in /opt/thaw/functions/FUNCTION,
 *                                      handler class FUNCTION
 *   java [flags] thaw.Agent --user     a deployed function: code at /opt/thaw/user (classes at
 *                                      its top, jars at its top and in lib/), handler named by
 *                                      THAW_HANDLER
 * </pre>
 *
 * The handler runs on a thread of its own ("thaw-invoke") while the agent's
 * thread waits for it with the invocation's timeout; between requests the
 * agent's thread blocks reading fd 3.
 */
public final class Agent {
    static final int AGENT_VERSION = 1;
    private static final String THAW_DIR = "/opt/thaw";
    private static final String USER_FLAG = "--user";
    private static final List<String> SIZES = List.of("I", "II", "III", "IV");
    private static final long MAX_OUTPUT = longEnv("THAW_MAX_OUTPUT", 1 << 20);
    private static final long DEFAULT_TIMEOUT_MS = longEnv("THAW_DEFAULT_TIMEOUT_MS", 60000);

    private final Channel channel;
    private final ObjectMapper json;
    private final String function;
    private final boolean user;
    private Handler handler;
    private ObjectNode loadReply;
    private int invocations;
    private boolean hooksRunBeforeSnapshot;
    private boolean warmedUp;
    private ExecutorService invoker;
    private final SecureRandom ids = new SecureRandom();

    private Agent(Channel channel, String function, boolean user) {
        this.channel = channel;
        this.function = function;
        this.user = user;
        this.json = new ObjectMapper()
                .configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);
        this.invoker = newInvoker();
    }

    private static long longEnv(String name, long otherwise) {
        try {
            String v = System.getenv(name);
            return v == null ? otherwise : Long.parseLong(v);
        } catch (NumberFormatException e) {
            return otherwise;
        }
    }

    static void log(String msg) {
        System.err.println("agent: " + msg);
        System.err.flush();
    }

    private static ExecutorService newInvoker() {
        return Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "thaw-invoke");
            t.setDaemon(true);
            return t;
        });
    }

    public static void main(String[] args) {
        if (args.length != 1) {
            log("usage: thaw.Agent FUNCTION | --user");
            System.exit(2);
        }
        Channel ch;
        try {
            ch = new Channel(longEnv("THAW_MAX_REQUEST", 16 << 20));
        } catch (ReflectiveOperationException e) {
            log("cannot open fd 3 (is --add-opens java.base/java.io=ALL-UNNAMED given?): " + e);
            System.exit(2);
            return;
        }
        boolean user = args[0].equals(USER_FLAG);
        String name = user ? System.getenv().getOrDefault("THAW_FUNCTION_NAME", "user") : args[0];
        new Agent(ch, name, user).serve();
    }

    private void serve() {
        while (true) {
            byte[] body;
            try {
                body = channel.receive();
            } catch (Channel.TooLong e) {
                reply(error("bad_request", e.getMessage()));
                continue;
            } catch (EOFException e) {
                log("fd 3: " + e.getMessage());
                System.exit(0);
                return;
            } catch (IOException e) {
                log("fd 3: " + e);
                System.exit(2);
                return;
            }
            if (body == null) {
                System.exit(0);
                return;
            }
            ObjectNode reply;
            try {
                reply = handle(parse(body));
            } catch (BadRequest e) {
                reply = error("bad_request", e.getMessage());
            } catch (Throwable t) {
                reply = error("bad_request", "agent: " + t);
            }
            reply(reply);
            if (reply.path("op").asText("").equals("exit")) {
                System.exit(0);
            }
        }
    }

    private void reply(ObjectNode r) {
        try {
            channel.send(json.writeValueAsBytes(r));
        } catch (IOException e) {
            log("fd 3: " + e);
            System.exit(2);
        }
    }

    static final class BadRequest extends Exception {
        private static final long serialVersionUID = 1L;

        BadRequest(String message) {
            super(message);
        }
    }

    private ObjectNode parse(byte[] body) throws BadRequest {
        try {
            StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .decode(java.nio.ByteBuffer.wrap(body));
        } catch (CharacterCodingException e) {
            throw new BadRequest("request is not UTF-8 JSON: invalid UTF-8");
        }
        JsonNode n;
        try {
            n = json.readTree(body);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new BadRequest("request is not UTF-8 JSON: " + e.getOriginalMessage());
        } catch (IOException e) {
            throw new BadRequest("request is not UTF-8 JSON: " + e.getMessage());
        }
        if (n == null || !n.isObject()) {
            throw new BadRequest("request is not a JSON object");
        }
        return (ObjectNode) n;
    }

    private ObjectNode ok() {
        return json.createObjectNode().put("ok", true);
    }

    private ObjectNode error(String kind, String message) {
        return json.createObjectNode().put("ok", false).put("error", kind).put("message", message);
    }

    private ObjectNode handle(ObjectNode req) throws BadRequest {
        JsonNode op = req.get("op");
        if (op == null || !op.isTextual()) {
            throw new BadRequest("missing or non-string 'op'");
        }
        switch (op.asText()) {
            case "health":
                return ok().put("state", handler == null ? "idle" : "ready")
                        .put("function", function).put("invocations", invocations)
                        .put("pid", ProcessHandle.current().pid())
                        .put("agent_version", AGENT_VERSION).put("runtime", "java");
            case "load":
                return load();
            case "invoke":
                return invoke(req);
            case "prepare_checkpoint":
                return prepareCheckpoint();
            case "restored":
                return restored(req);
            case "after_restore":
                if (!req.path("instance_id").isTextual()) {
                    throw new BadRequest("after_restore needs a string 'instance_id'");
                }
                return ok().put("op", "after_restore").put("hook", false).put("hook_ms", 0.0);
            case "exit":
                return ok().put("op", "exit");
            default:
                throw new BadRequest("unknown op " + op);
        }
    }

    // ------------------------------------------------------------------ load

    private ObjectNode load() throws BadRequest {
        if (loadReply != null) {
            return loadReply.deepCopy().put("already_loaded", true);
        }
        String spec;
        List<URL> path = new ArrayList<>();
        try {
            if (user) {
                spec = System.getenv("THAW_HANDLER");
                if (spec == null || spec.isEmpty()) {
                    throw new BadRequest("THAW_HANDLER is not set");
                }
                File code = new File(THAW_DIR, "user");
                path.add(code.toURI().toURL());
                // a jar deployed as it is, or a zip's lib/*.jar (Lambda's layout)
                for (File dir : new File[] {code, new File(code, "lib")}) {
                    File[] jars = dir.listFiles((d, n) -> n.endsWith(".jar"));
                    if (jars != null) {
                        Arrays.sort(jars);
                        for (File j : jars) {
                            path.add(j.toURI().toURL());
                        }
                    }
                }
            } else {
                if (!function.matches("[A-Za-z0-9_]+")) {
                    throw new BadRequest("unknown function '" + function + "'");
                }
                File dir = new File(THAW_DIR + "/functions", function);
                if (!dir.isDirectory()) {
                    throw new BadRequest("unknown function '" + function + "'");
                }
                path.add(dir.toURI().toURL());
                spec = function;
            }
        } catch (MalformedURLException e) {
            throw new BadRequest("function code path: " + e.getMessage());
        }
        long t0 = System.nanoTime();
        ClassLoader loader = new FunctionLoader(path.toArray(new URL[0]));
        Thread.currentThread().setContextClassLoader(loader);
        try {
            handler = Handler.resolve(spec, loader, json);
        } catch (Handler.BadHandler e) {
            throw new BadRequest(e.getMessage());
        } catch (Throwable t) {
            return functionError(t, "init: ");
        }
        double ms = (System.nanoTime() - t0) / 1e6;
        loadReply = ok().put("op", "load").put("function", function).put("import_ms", ms)
                .put("init_ms", 0.0).put("rss_kb", heapKb())
                .put("crac_resources", thaw.crac.Core.registered());
        return loadReply;
    }

    /**
     * The function's class loader: its own jars and classes over the JDK's,
     * with Lambda's and CRaC's API from the agent's, as Lambda's runtime
     * loads a function. The agent's libraries (Jackson) stay out of its
     * sight, so a function that brings another version of them gets its own.
     */
    static final class FunctionLoader extends URLClassLoader {
        private static final String[] SHARED = {
            "com.amazonaws.services.lambda.runtime.", "org.crac.",
        };

        static {
            registerAsParallelCapable();
        }

        FunctionLoader(URL[] urls) {
            super("function", urls, ClassLoader.getPlatformClassLoader());
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            for (String p : SHARED) {
                if (name.startsWith(p)) {
                    return Agent.class.getClassLoader().loadClass(name);
                }
            }
            return super.loadClass(name, resolve);
        }
    }

    /** The heap in use (no /proc in the sandbox, and Java has no getrusage). */
    private static long heapKb() {
        Runtime r = Runtime.getRuntime();
        return (r.totalMemory() - r.freeMemory()) / 1024;
    }

    // ---------------------------------------------------------------- invoke

    private ObjectNode invoke(ObjectNode req) throws BadRequest {
        JsonNode size = req.get("size");
        JsonNode input = req.get("input");
        if ((size == null) == (input == null)) {
            throw new BadRequest("invoke needs exactly one of 'size' and 'input'");
        }
        JsonNode event = input;
        if (size != null) {
            if (!size.isTextual() || !SIZES.contains(size.asText())) {
                throw new BadRequest("unknown size " + size);
            }
            event = sizedInput(size.asText());
        }
        long timeoutMs = DEFAULT_TIMEOUT_MS;
        JsonNode t = req.get("timeout_ms");
        if (t != null && t.isNull()) {
            timeoutMs = -1;
        } else if (t != null) {
            if (!t.isNumber() || t.asDouble() <= 0) {
                throw new BadRequest("timeout_ms must be a positive number or null");
            }
            timeoutMs = (long) Math.ceil(t.asDouble());
        }
        JsonNode rid = req.get("request_id");
        if (rid != null && !rid.isTextual()) {
            throw new BadRequest("request_id must be a string");
        }
        if (handler == null) {
            ObjectNode l = load();
            if (!l.path("ok").asBoolean()) {
                return l;
            }
        }
        String requestId = rid != null ? rid.asText() : newRequestId();
        return call(handler, event, requestId, timeoutMs, true);
    }

    private JsonNode sizedInput(String size) throws BadRequest {
        if (user || function.startsWith("_")) {
            return json.createObjectNode();
        }
        Path p = Path.of(THAW_DIR, "inputs", function, size + ".json");
        try {
            return json.readTree(Files.readAllBytes(p));
        } catch (IOException e) {
            throw new BadRequest("no input " + size + " for " + function + ": " + e.getMessage());
        }
    }

    private String newRequestId() {
        byte[] b = new byte[16];
        ids.nextBytes(b);
        b[6] = (byte) ((b[6] & 0x0f) | 0x40);
        b[8] = (byte) ((b[8] & 0x3f) | 0x80);
        String h = HexFormat.of().formatHex(b);
        return h.substring(0, 8) + "-" + h.substring(8, 12) + "-" + h.substring(12, 16) + "-"
                + h.substring(16, 20) + "-" + h.substring(20);
    }

    /** One call of `h` on the invoker thread, waited for with the timeout. */
    private ObjectNode call(Handler h, JsonNode event, String requestId, long timeoutMs,
            boolean count) {
        long deadline = timeoutMs < 0 ? Long.MAX_VALUE : System.nanoTime() + timeoutMs * 1_000_000L;
        LambdaContext ctx = new LambdaContext(requestId, deadline, function);
        long t0 = System.nanoTime();
        Future<byte[]> f = invoker.submit(() -> {
            try {
                return h.call(event, ctx, json);
            } catch (Error | Exception e) {
                throw e;
            } catch (Throwable e) {
                throw new ExecutionException(e);
            }
        });
        if (count) {
            invocations++;
        }
        byte[] encoded;
        try {
            encoded = timeoutMs < 0 ? f.get() : f.get(timeoutMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            f.cancel(true);
            // the thread may never come back: later calls get a new one
            invoker.shutdownNow();
            invoker = newInvoker();
            return error("timeout", "function ran past its timeout of " + timeoutMs + " ms")
                    .put("exec_ms", sinceMs(t0));
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof ExecutionException && c.getCause() != null) {
                c = c.getCause();
            }
            if (c instanceof com.fasterxml.jackson.databind.JsonMappingException
                    && ((com.fasterxml.jackson.databind.JsonMappingException) c).getProcessor()
                            instanceof com.fasterxml.jackson.core.JsonGenerator) {
                return error("bad_output", "output is not JSON: "
                        + ((com.fasterxml.jackson.databind.JsonMappingException) c).getOriginalMessage())
                        .put("exec_ms", sinceMs(t0));
            }
            return functionError(c, "").put("exec_ms", sinceMs(t0));
        } catch (InterruptedException e) {
            return error("function_error", "agent interrupted").put("exec_ms", sinceMs(t0));
        }
        double ms = sinceMs(t0);
        if (encoded.length > MAX_OUTPUT) {
            return error("bad_output", "output of " + encoded.length
                    + " bytes exceeds the limit of " + MAX_OUTPUT + " bytes").put("exec_ms", ms);
        }
        // the answer's JSON goes into the reply as it is
        return ok().putRawValue("output",
                new RawValue(new String(encoded, StandardCharsets.UTF_8))).put("exec_ms", ms);
    }

    private static double sinceMs(long t0) {
        return (System.nanoTime() - t0) / 1e6;
    }

    /** Lambda's error shape and the protocol's, for the function's exception. */
    private ObjectNode functionError(Throwable t, String prefix) {
        String type = t.getClass().getName();
        String msg = t.getMessage() == null ? "" : t.getMessage();
        StringWriter trace = new StringWriter();
        t.printStackTrace(new PrintWriter(trace));
        ObjectNode r = error("function_error", prefix + type + (msg.isEmpty() ? "" : ": " + msg))
                .put("error_type", type).put("error_message", msg)
                .put("traceback", trace.toString());
        ArrayNode frames = r.putArray("stack_trace");
        for (String f : Handler.functionFrames(t)) {
            frames.add(f);
        }
        return r;
    }

    // ------------------------------------------------------ snapshot, restore

    private ObjectNode prepareCheckpoint() {
        if (!hooksRunBeforeSnapshot) {
            try {
                thaw.crac.Core.getGlobalContext().beforeCheckpoint(null);
            } catch (Exception e) {
                return functionError(e, "before_snapshot hook: ");
            }
            hooksRunBeforeSnapshot = true;
        }
        if (!warmedUp) {
            warmUp();
            warmedUp = true;
        }
        System.out.flush();
        System.err.flush();
        // a compacted heap makes a smaller image
        System.gc();
        return ok().put("op", "prepare_checkpoint").set("threads", json.createArrayNode());
    }

    /**
     * What every clone runs first, run once here with nothing of the
     * function's, so that its classes are loaded and its code compiled in
     * the snapshot rather than in each clone's first request: a request's
     * JSON parsed and its reply encoded, the generators re-seeded with a
     * throwaway seed, a request id drawn, an invocation of a handler of the
     * agent's own on the invoker thread; then the function's handler's JSON
     * reader and writer primed on empty values (Handler.prime).
     */
    private void warmUp() {
        byte[] seed = new byte[32];
        ids.nextBytes(seed);
        try {
            Handler echo = Handler.resolve("thaw.Agent$Echo::handle",
                    Agent.class.getClassLoader(), json);
            for (int i = 0; i < 8; i++) {
                parse("{\"op\":\"invoke\",\"input\":{\"k\":[1,2.5,\"v\",null,true]}}"
                        .getBytes(StandardCharsets.UTF_8));
                Reseed.all(seed);
                json.writeValueAsBytes(call(echo, json.createObjectNode().put("k", i),
                        newRequestId(), 1000, false));
                json.writeValueAsBytes(call(echo, json.createArrayNode().add(i).add("s"),
                        newRequestId(), 1000, false));
            }
        } catch (Throwable t) {
            log("warm-up: " + t);
        }
        if (handler != null) {
            handler.prime(json);
        }
    }

    /** The warm-up's handler. */
    public static final class Echo {
        public Object handle(Object event, com.amazonaws.services.lambda.runtime.Context c) {
            return event;
        }
    }

    private ObjectNode restored(ObjectNode req) throws BadRequest {
        JsonNode s = req.get("seed");
        if (s == null || !s.isTextual() || !s.asText().matches("[0-9a-fA-F]{64}")) {
            throw new BadRequest("restored needs 'seed': 64 hex characters");
        }
        JsonNode unmap = req.get("unmap");
        if (unmap != null && !unmap.isNull() && !(unmap.isArray() && unmap.size() == 2
                && unmap.get(0).canConvertToLong() && unmap.get(1).canConvertToLong())) {
            throw new BadRequest("unmap must be [address, length]");
        }
        byte[] seed = HexFormat.of().parseHex(s.asText());
        List<String> done;
        try {
            done = Reseed.all(seed);
        } catch (ReflectiveOperationException e) {
            throw new BadRequest("re-seeding failed (is --add-opens given?): " + e);
        }
        try {
            thaw.crac.Core.getGlobalContext().afterRestore(null);
        } catch (Exception e) {
            return functionError(e, "after_restore hook: ");
        }
        ObjectNode r = ok().put("state", "restored");
        ArrayNode list = r.putArray("reseeded");
        done.forEach(list::add);
        return r;
    }
}
