package thaw;

import com.amazonaws.services.lambda.runtime.Context;
import com.amazonaws.services.lambda.runtime.RequestHandler;
import com.amazonaws.services.lambda.runtime.RequestStreamHandler;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.ObjectWriter;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * A Java handler, resolved the way Lambda's Java runtime does: `pkg.Class`
 * (its `handleRequest`) or `pkg.Class::method`; a `RequestHandler<I, O>`, a
 * `RequestStreamHandler`, or a public method taking (), (event), (event,
 * Context), (InputStream, OutputStream) or (InputStream, OutputStream,
 * Context). The class is instantiated once, at load (its constructor is the
 * function's init, and so in the snapshot), unless the method is static.
 */
final class Handler {
    private final Object target;
    private final Method method;
    private final boolean stream;
    private final boolean takesEvent;
    private final boolean takesContext;
    /** Jackson's reader of the event's type and writer of the answer's,
     * made at load as Lambda's runtime makes its serializers: building one
     * inspects the classes (tens of milliseconds for a small POJO), which
     * belongs to init and so to the snapshot, not to each clone's first call. */
    private final ObjectReader reader;
    private final ObjectWriter writer;

    private Handler(Object target, Method m, boolean stream, ObjectMapper json) {
        this.target = target;
        this.method = m;
        this.stream = stream;
        int n = m.getParameterCount();
        this.takesEvent = stream || n >= 1;
        this.takesContext = n == (stream ? 3 : 2);
        this.reader = !stream && n >= 1
                ? json.readerFor(json.getTypeFactory().constructType(m.getGenericParameterTypes()[0]))
                : null;
        Class<?> ret = m.getReturnType();
        this.writer = stream || ret == void.class || ret == Void.class
                ? null
                : json.writerFor(json.getTypeFactory().constructType(m.getGenericReturnType()));
    }

    /** Thrown for a handler string or class Lambda would not accept. */
    static final class BadHandler extends Exception {
        private static final long serialVersionUID = 1L;

        BadHandler(String message) {
            super(message);
        }
    }

    static Handler resolve(String spec, ClassLoader loader, ObjectMapper json)
            throws BadHandler, Throwable {
        String cls = spec;
        String name = null;
        int sep = spec.indexOf("::");
        if (sep >= 0) {
            cls = spec.substring(0, sep);
            name = spec.substring(sep + 2);
        }
        if (cls.isEmpty() || !cls.matches("[\\p{L}_$][\\p{L}\\p{N}_$]*(\\.[\\p{L}_$][\\p{L}\\p{N}_$]*)*")
                || (name != null && !name.matches("[\\p{L}_$][\\p{L}\\p{N}_$]*"))) {
            throw new BadHandler("handler " + quote(spec)
                    + " is not package.Class or package.Class::method");
        }
        Class<?> c;
        try {
            c = Class.forName(cls, true, loader);
        } catch (ClassNotFoundException e) {
            throw new BadHandler("handler class " + cls + " not found in the function's code");
        } catch (ExceptionInInitializerError e) {
            throw e.getCause() == null ? e : e.getCause();
        }
        Method m = name == null ? defaultMethod(c) : named(c, name);
        if (m == null) {
            throw new BadHandler("handler " + quote(spec) + ": " + c.getName()
                    + (name == null
                            ? " implements neither RequestHandler nor RequestStreamHandler"
                            : " has no public method " + name
                                    + " taking (), (event), (event, Context),"
                                    + " (InputStream, OutputStream) or"
                                    + " (InputStream, OutputStream, Context)"));
        }
        Object target = null;
        if (!Modifier.isStatic(m.getModifiers())) {
            Constructor<?> k;
            try {
                k = c.getDeclaredConstructor();
            } catch (NoSuchMethodException e) {
                throw new BadHandler(c.getName() + " has no constructor without parameters");
            }
            k.setAccessible(true);
            try {
                target = k.newInstance();
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        }
        m.setAccessible(true);
        return new Handler(target, m, isStream(m), json);
    }

    private static String quote(String s) {
        return "\"" + s + "\"";
    }

    private static boolean isStream(Method m) {
        Class<?>[] p = m.getParameterTypes();
        return p.length >= 2 && p[0] == InputStream.class && p[1] == OutputStream.class;
    }

    private static boolean acceptable(Method m) {
        if (!Modifier.isPublic(m.getModifiers()) || m.isBridge() || m.isSynthetic()) {
            return false;
        }
        Class<?>[] p = m.getParameterTypes();
        if (isStream(m)) {
            return p.length == 2 || (p.length == 3 && p[2] == Context.class);
        }
        return p.length <= 1 || (p.length == 2 && p[1] == Context.class);
    }

    private static Method defaultMethod(Class<?> c) {
        if (RequestStreamHandler.class.isAssignableFrom(c)) {
            try {
                return c.getMethod(
                        "handleRequest", InputStream.class, OutputStream.class, Context.class);
            } catch (NoSuchMethodException e) {
                return null;
            }
        }
        if (RequestHandler.class.isAssignableFrom(c)) {
            return named(c, "handleRequest");
        }
        return null;
    }

    /**
     * The public method `name`, the concrete one over a generic bridge, the
     * one with the most parameters among overloads (Lambda's preference).
     */
    private static Method named(Class<?> c, String name) {
        Method best = null;
        for (Method m : c.getMethods()) {
            if (m.getName().equals(name) && acceptable(m)
                    && (best == null || m.getParameterCount() > best.getParameterCount())) {
                best = m;
            }
        }
        return best;
    }

    /**
     * Runs Jackson's reader and writer once on empty values of the handler's
     * types (an empty event object; the answer's class made by its
     * constructor without parameters, if it has one), so that their first
     * use is in the snapshot and not in each clone's first call. The
     * handler itself is not called. Failures are of no consequence here.
     */
    void prime(ObjectMapper json) {
        try {
            if (reader != null) {
                reader.readValue(json.createObjectNode());
            }
        } catch (Throwable e) {
            // an event type that cannot be empty: its first call pays
        }
        try {
            Class<?> ret = method.getReturnType();
            if (writer != null && !ret.isInterface() && !Modifier.isAbstract(ret.getModifiers())
                    && !ret.getName().startsWith("java.")) {
                Constructor<?> k = ret.getDeclaredConstructor();
                if (Modifier.isPublic(k.getModifiers())) {
                    writer.writeValueAsBytes(k.newInstance());
                }
            }
        } catch (Throwable e) {
            // as above
        }
    }

    /** The handler's answer to `event`, encoded as JSON; the function's own exception is thrown. */
    byte[] call(JsonNode event, Context context, ObjectMapper json) throws Throwable {
        // frameworks look classes and resources up through the context loader
        Thread.currentThread().setContextClassLoader(method.getDeclaringClass().getClassLoader());
        try {
            if (stream) {
                InputStream in = new ByteArrayInputStream(json.writeValueAsBytes(event));
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                if (takesContext) {
                    method.invoke(target, in, out, context);
                } else {
                    method.invoke(target, in, out);
                }
                return json.writeValueAsBytes(streamOutput(out.toByteArray(), json));
            }
            Object arg = reader != null ? reader.readValue(event) : null;
            Object r;
            if (takesContext) {
                r = method.invoke(target, arg, context);
            } else if (takesEvent) {
                r = method.invoke(target, arg);
            } else {
                r = method.invoke(target);
            }
            return writer == null ? json.writeValueAsBytes(null) : writer.writeValueAsBytes(r);
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }

    /** A stream handler's bytes: JSON when they parse, else a string. */
    private static JsonNode streamOutput(byte[] bytes, ObjectMapper json) {
        if (bytes.length == 0) {
            return json.nullNode();
        }
        try {
            return json.readTree(bytes);
        } catch (java.io.IOException e) {
            return json.getNodeFactory().textNode(new String(bytes, StandardCharsets.UTF_8));
        }
    }

    /**
     * The function's frames of `t`'s stack as Lambda prints them
     * (`pkg.Class.method(File.java:12)`, innermost first): those above the
     * reflective call the agent made.
     */
    static List<String> functionFrames(Throwable t) {
        List<String> out = new ArrayList<>();
        for (StackTraceElement e : t.getStackTrace()) {
            String c = e.getClassName();
            if (c.startsWith("thaw.") || c.startsWith("jdk.internal.reflect.")
                    || c.startsWith("java.lang.reflect.")) {
                break;
            }
            String where = e.getFileName() == null
                    ? "Unknown Source"
                    : e.getLineNumber() >= 0 ? e.getFileName() + ":" + e.getLineNumber() : e.getFileName();
            out.add(c + "." + e.getMethodName() + "(" + where + ")");
        }
        return out;
    }
}
