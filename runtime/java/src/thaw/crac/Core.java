package thaw.crac;

import java.util.ArrayList;
import java.util.List;

/**
 * thaw's implementation of CRaC's API, which `org.crac` (the facade functions
 * compile against) reaches through `-Dorg.crac.Core.Compat=thaw.crac`, as
 * Lambda's runtime plugs in its own. thaw takes the snapshot itself after
 * init; the agent runs the hooks: before the snapshot in reverse order of
 * registration, after every restore in order of registration (SnapStart's
 * order).
 */
public final class Core {
    private static final Global GLOBAL = new Global();

    private Core() {}

    public static Context<Resource> getGlobalContext() {
        return GLOBAL;
    }

    /** A function cannot ask for a checkpoint: thaw takes it after init. */
    public static void checkpointRestore() throws CheckpointException, RestoreException {
        throw new CheckpointException(
                "thaw snapshots a function after its init; a checkpoint cannot be requested");
    }

    /** How many resources are registered (the agent's load reply says it). */
    public static int registered() {
        return GLOBAL.count();
    }

    private static final class Global extends Context<Resource> {
        private final List<Resource> resources = new ArrayList<>();

        @Override
        public synchronized void register(Resource resource) {
            if (resource == null) {
                throw new NullPointerException("resource");
            }
            resources.add(resource);
        }

        synchronized int count() {
            return resources.size();
        }

        private synchronized List<Resource> snapshot() {
            return new ArrayList<>(resources);
        }

        @Override
        public void beforeCheckpoint(Context<? extends Resource> context)
                throws CheckpointException {
            List<Resource> all = snapshot();
            CheckpointException failed = null;
            for (int i = all.size() - 1; i >= 0; i--) {
                try {
                    all.get(i).beforeCheckpoint(this);
                } catch (Exception e) {
                    if (failed == null) {
                        failed = new CheckpointException(describe(e));
                    }
                    failed.addSuppressed(e);
                }
            }
            if (failed != null) {
                throw failed;
            }
        }

        @Override
        public void afterRestore(Context<? extends Resource> context) throws RestoreException {
            RestoreException failed = null;
            for (Resource r : snapshot()) {
                try {
                    r.afterRestore(this);
                } catch (Exception e) {
                    if (failed == null) {
                        failed = new RestoreException(describe(e));
                    }
                    failed.addSuppressed(e);
                }
            }
            if (failed != null) {
                throw failed;
            }
        }
    }

    /** An exception as `Type: message`, unwrapping org.crac's reflective call. */
    static String describe(Throwable e) {
        while (e instanceof java.lang.reflect.InvocationTargetException
                || e instanceof java.lang.reflect.UndeclaredThrowableException) {
            Throwable c = e.getCause();
            if (c == null) {
                break;
            }
            e = c;
        }
        String m = e.getMessage();
        return e.getClass().getName() + (m == null ? "" : ": " + m);
    }
}
